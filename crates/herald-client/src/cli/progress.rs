//! A progress bar on stderr for the long commands (`topics export`, `topics import`): one line
//! redrawn in place a few times a second, with the count, the rate and the time left.
//!
//! Drawn only when stderr is a terminal and the command was not given `--quiet`: a bar written
//! into a log file or a pipe is a heap of carriage returns. Hand-written (a few lines) rather
//! than a dependency; what it counts is shared with the tasks that do the work through an
//! atomic, and one task draws.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the bar is redrawn.
const REDRAW: Duration = Duration::from_millis(200);
/// The bar's width in characters.
const WIDTH: usize = 30;

/// A count of work done out of a known total, drawn on stderr while it runs.
#[derive(Clone)]
pub struct Progress {
    shared: Arc<Shared>,
}

struct Shared {
    label: String,
    unit: &'static str,
    total: u64,
    done: AtomicU64,
    started: Instant,
    drawn: bool,
    finished: AtomicBool,
}

impl Progress {
    /// A bar for `total` `unit`s, drawn when stderr is a terminal and not `quiet`.
    pub fn start(label: &str, unit: &'static str, total: u64, quiet: bool) -> Progress {
        let drawn = !quiet && std::io::stderr().is_terminal();
        let progress = Progress {
            shared: Arc::new(Shared {
                label: label.to_string(),
                unit,
                total,
                done: AtomicU64::new(0),
                started: Instant::now(),
                drawn,
                finished: AtomicBool::new(false),
            }),
        };
        if drawn {
            let shared = Arc::clone(&progress.shared);
            tokio::spawn(async move {
                while !shared.finished.load(Ordering::Relaxed) {
                    shared.draw();
                    tokio::time::sleep(REDRAW).await;
                }
            });
        }
        progress
    }

    /// Counts `n` more done.
    pub fn add(&self, n: u64) {
        self.shared.done.fetch_add(n, Ordering::Relaxed);
    }

    /// How many are done.
    #[cfg(test)]
    pub fn done(&self) -> u64 {
        self.shared.done.load(Ordering::Relaxed)
    }

    /// Draws the last state and ends the line: the bar stays as a record of the run.
    pub fn finish(&self) {
        if !self.shared.finished.swap(true, Ordering::Relaxed) && self.shared.drawn {
            self.shared.draw();
            eprintln!();
        }
    }
}

impl Shared {
    fn draw(&self) {
        let line = render(
            &self.label,
            self.unit,
            self.done.load(Ordering::Relaxed),
            self.total,
            self.started.elapsed(),
        );
        let mut stderr = std::io::stderr().lock();
        // Nothing to do about a terminal that went away: the work goes on.
        let _ = write!(stderr, "\r{line}\x1b[K");
        let _ = stderr.flush();
    }
}

/// One line of the bar: `label [#####.....]  45%  450000/1000000 unit  85000 unit/s  ETA 6s`.
pub fn render(label: &str, unit: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let fraction = if total == 0 {
        1.0
    } else {
        (done as f64 / total as f64).min(1.0)
    };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let bar = format!("{}{}", "#".repeat(filled), ".".repeat(WIDTH - filled));
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    };
    let eta = if rate > 0.0 && done < total {
        format!("  ETA {}s", ((total - done) as f64 / rate).ceil() as u64)
    } else {
        String::new()
    };
    format!(
        "{label} [{bar}] {:>3}%  {done}/{total} {unit}  {:.0} {unit}/s{eta}",
        (fraction * 100.0).floor() as u64,
        rate
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_how_far_how_fast_and_how_long_still() {
        let line = render("import", "msgs", 250, 1000, Duration::from_secs(5));
        assert_eq!(
            line,
            "import [########......................]  25%  250/1000 msgs  50 msgs/s  ETA 15s"
        );
        let done = render("export", "offsets", 10, 10, Duration::from_secs(1));
        assert!(
            done.contains("[##############################] 100%"),
            "{done}"
        );
        assert!(!done.contains("ETA"), "{done}");
        let empty = render("export", "offsets", 0, 0, Duration::ZERO);
        assert!(empty.contains("100%"), "{empty}");
    }

    #[test]
    fn no_bar_is_drawn_when_quiet() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let progress = Progress::start("import", "msgs", 10, true);
            progress.add(4);
            progress.add(6);
            assert_eq!(progress.done(), 10);
            progress.finish();
        });
    }
}
