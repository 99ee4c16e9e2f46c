//! `herald_process_*` gauges, read at scrape time: the node's resident memory, and what the
//! allocator holds of it. Their difference is what the memory budget does not see: when RSS
//! grows while the heap in use does not, memory is held free in the allocator's arenas
//! (fragmentation), not leaked by Herald; when both grow, something Herald keeps grows.

use std::fmt::Write as _;

/// The process's resident set, from `/proc/self/statm` (`None` elsewhere).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a constant of the running system.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page_size).ok().map(|size| pages * size)
}

/// What glibc's allocator holds: (bytes in use, bytes free in its arenas).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_bytes() -> Option<(u64, u64)> {
    // SAFETY: mallinfo2 takes no arguments and only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    Some(((info.uordblks + info.hblkhd) as u64, info.fordblks as u64))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_bytes() -> Option<(u64, u64)> {
    None
}

/// The `herald_process_*` gauges this platform can read.
pub(in crate::api) fn render_process() -> String {
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        let _ = writeln!(
            text,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    if let Some(resident) = resident_bytes() {
        gauge(
            "herald_process_resident_memory_bytes",
            "The node's resident memory (RSS)",
            resident,
        );
    }
    if let Some((in_use, free)) = heap_bytes() {
        gauge(
            "herald_process_heap_in_use_bytes",
            "Bytes the allocator has handed out and not had back (RocksDB's included)",
            in_use,
        );
        gauge(
            "herald_process_heap_free_bytes",
            "Bytes free inside the allocator's arenas: resident, but not in use",
            free,
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_gauges_read_this_process() {
        let text = render_process();
        let value = |name: &str| {
            text.lines()
                .find(|line| line.starts_with(&format!("{name} ")))
                .and_then(|line| line.rsplit(' ').next())
                .and_then(|value| value.parse::<u64>().ok())
        };
        let resident = value("herald_process_resident_memory_bytes").expect("RSS on Linux");
        assert!(resident > 1 << 20, "{text}");
        if cfg!(target_env = "gnu") {
            let in_use = value("herald_process_heap_in_use_bytes").expect("heap in use");
            assert!(in_use > 0, "{text}");
        }
    }
}
