//! Network partitions between test nodes with nftables: one table per cluster, named after this
//! process and the cluster, holding `ip saddr A ip daddr B drop` rules on the output hook (where
//! loopback traffic passes). Packets are dropped, not refused, so a cut link looks like a real
//! partition: silence, no reset. Every `nft` call of the harness is here.
//!
//! The table goes when the [`Firewall`] is dropped, also while a test panics. A process killed
//! outright leaves its table behind; the next [`Firewall::create`] deletes tables of processes
//! that are gone. Needs root and the `nft` tool (`.ci/run` installs it); without them a test
//! that cuts links fails, saying so, rather than passing without a partition.

use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Table names: `herald_test_<pid>_<n>`.
const TABLE_PREFIX: &str = "herald_test_";
const CHAIN: &str = "cut";

static TABLES: AtomicU32 = AtomicU32::new(0);

/// A table of drop rules; deleted on drop.
pub struct Firewall {
    table: String,
}

impl Firewall {
    /// A new empty table with an output chain, or why not (not root, no `nft`, ...).
    pub fn create() -> Result<Firewall, String> {
        if effective_uid() != Some(0) {
            return Err(
                "network partitions need root (nftables rules): run the partition tests as root"
                    .into(),
            );
        }
        nft(&["--version"]).map_err(|err| {
            format!("network partitions need the nft tool (apt-get install nftables): {err}")
        })?;
        delete_orphaned_tables();
        let table = format!(
            "{TABLE_PREFIX}{}_{}",
            std::process::id(),
            TABLES.fetch_add(1, Ordering::Relaxed)
        );
        nft(&["add", "table", "inet", &table])?;
        let firewall = Firewall { table };
        nft(&[
            "add",
            "chain",
            "inet",
            &firewall.table,
            CHAIN,
            "{ type filter hook output priority 0; policy accept; }",
        ])?;
        Ok(firewall)
    }

    /// Drops every packet from `from` to `to` from now on (one direction).
    pub fn drop_packets(&self, from: IpAddr, to: IpAddr) -> Result<(), String> {
        let (from, to) = (from.to_string(), to.to_string());
        nft(&[
            "add",
            "rule",
            "inet",
            &self.table,
            CHAIN,
            "ip",
            "saddr",
            &from,
            "ip",
            "daddr",
            &to,
            "drop",
        ])
    }

    /// Removes every drop rule.
    pub fn clear(&self) -> Result<(), String> {
        nft(&["flush", "chain", "inet", &self.table, CHAIN])
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Err(err) = nft(&["delete", "table", "inet", &self.table]) {
            eprintln!("could not delete nftables table {}: {err}", self.table);
        }
    }
}

/// This process's effective user id, from `/proc/self/status` (`Uid: real effective ...`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Deletes the tables of test processes that no longer run (killed before they could).
fn delete_orphaned_tables() {
    let Ok(listing) = nft_output(&["list", "tables"]) else {
        return;
    };
    for line in listing.lines() {
        let Some(name) = line.trim().strip_prefix("table inet ") else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(TABLE_PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = nft(&["delete", "table", "inet", name]);
        }
    }
}

fn nft(args: &[&str]) -> Result<(), String> {
    nft_output(args).map(drop)
}

fn nft_output(args: &[&str]) -> Result<String, String> {
    let output = Command::new("nft")
        .args(args)
        .output()
        .map_err(|err| format!("cannot run nft {args:?}: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "nft {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
