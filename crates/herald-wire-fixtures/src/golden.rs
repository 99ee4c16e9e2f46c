//! One area's fixtures (a folder under each wire version's): checking samples against them,
//! writing the missing ones on request.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// `HERALD_UPDATE_WIRE_FIXTURES=1` writes the fixtures that are missing (never one that
/// exists) into the current wire version's folder.
pub const UPDATE_ENV: &str = "HERALD_UPDATE_WIRE_FIXTURES";

const EXTENSION: &str = "bin";

/// How a decoded fixture is compared with its sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// By value (its `Debug` form), and it must encode back to its bytes: for types whose
    /// every field travels.
    Value,
    /// By what travels: it decodes, and encodes back to the sample's bytes. For types with
    /// fields that do not travel (`#[serde(skip)]`, such as a deadline set on arrival).
    WireForm,
}

/// The fixtures of one area (e.g. `raft-request`), checked sample by sample. Failures are
/// collected and reported together by [`Golden::finish`], so one run lists everything that
/// changed.
pub struct Golden {
    area: String,
    current: u16,
    root: PathBuf,
    checked: BTreeSet<String>,
    failures: Vec<String>,
    written: Vec<PathBuf>,
    /// Write missing fixtures ([`UPDATE_ENV`]).
    update: bool,
}

impl Golden {
    /// The fixtures of `area` for a release of wire version `current` (they may be in the
    /// folder of any version from 1 to it).
    pub fn new(area: &str, current: u16) -> Golden {
        Golden::at(&default_root(), area, current)
    }

    /// The same under another root than `migrations/wire/` (for tests of this crate).
    pub fn at(root: &Path, area: &str, current: u16) -> Golden {
        assert!(current >= 1, "wire versions start at 1");
        Golden {
            area: area.to_string(),
            current,
            root: root.to_path_buf(),
            checked: BTreeSet::new(),
            failures: Vec::new(),
            written: Vec::new(),
            update: std::env::var(UPDATE_ENV).is_ok_and(|value| value == "1"),
        }
    }

    /// Checks `sample`'s postcard encoding against the fixture `name`.
    pub fn check<T: Serialize + DeserializeOwned + Debug>(&mut self, name: &str, sample: &T) {
        match postcard::to_stdvec(sample) {
            Ok(bytes) => {
                self.check_bytes(name, &bytes, format!("{sample:?}"), decode_postcard::<T>)
            }
            Err(error) => self.failures.push(format!(
                "{}: the sample does not encode: {error}",
                self.label(name)
            )),
        }
    }

    /// Checks `sample` as a service body carries it: its operation tag (a big-endian `u16`),
    /// then its postcard encoding (`herald_rpc::operation_tag`).
    pub fn check_tagged<T: Serialize + DeserializeOwned + Debug>(
        &mut self,
        name: &str,
        tag: u16,
        sample: &T,
        compare: Compare,
    ) {
        let bytes = match postcard::to_extend(sample, tag.to_be_bytes().to_vec()) {
            Ok(bytes) => bytes,
            Err(error) => {
                let label = self.label(name);
                self.failures
                    .push(format!("{label}: the sample does not encode: {error}"));
                return;
            }
        };
        let expected = match compare {
            Compare::Value => format!("{sample:?}"),
            Compare::WireForm => hex(&bytes),
        };
        self.check_bytes(name, &bytes, expected, |stored| {
            let (stored_tag, body) = match stored {
                [high, low, body @ ..] => (u16::from_be_bytes([*high, *low]), body),
                _ => return Err("too short for an operation tag".to_string()),
            };
            if stored_tag != tag {
                return Err(format!("tag {stored_tag}, not {tag}"));
            }
            let decoded = decode_postcard::<T>(body)?;
            Ok(match compare {
                Compare::Value => decoded,
                // `decode_postcard` checked it encodes back to the same bytes.
                Compare::WireForm => hex(stored),
            })
        });
    }

    /// Checks a sample encoded some other way (e.g. an operation tag, then postcard): `bytes`
    /// is today's encoding, `expected` the sample's `Debug` form, `decode` today's decoder
    /// answering the `Debug` form of what it decoded.
    pub fn check_bytes(
        &mut self,
        name: &str,
        bytes: &[u8],
        expected: String,
        decode: impl Fn(&[u8]) -> Result<String, String>,
    ) {
        let label = self.label(name);
        if !self.checked.insert(name.to_string()) {
            self.failures
                .push(format!("{label}: two samples have this name"));
            return;
        }
        let stored: Vec<(PathBuf, Vec<u8>)> = (1..=self.current)
            .map(|version| self.path(version, name))
            .filter_map(|path| std::fs::read(&path).ok().map(|stored| (path, stored)))
            .collect();
        if stored.is_empty() {
            self.missing(name, bytes);
            return;
        }
        for (path, stored) in stored {
            let path = path.display();
            match decode(&stored) {
                Ok(decoded) if decoded == expected => {}
                Ok(decoded) => self.failures.push(format!(
                    "{path} decodes to\n    {decoded}\n  not to the sample\n    {expected}"
                )),
                Err(error) => self
                    .failures
                    .push(format!("{path} no longer decodes: {error}")),
            }
            if stored != bytes {
                self.failures.push(format!(
                    "{path}: the sample now encodes to other bytes ({} instead of {}): an \
                     encoding on the wire or in the log is frozen; a changed layout is a new \
                     operation tag or a new variant at the end (see migrations/README.md)",
                    hex(bytes),
                    hex(&stored)
                ));
            }
        }
    }

    /// Panics with every failure, and when a fixture of this area has no sample.
    pub fn finish(mut self) {
        for version in 1..=self.current {
            let folder = self.folder(version);
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let name = path
                    .file_stem()
                    .and_then(|stem| stem.to_str())
                    .unwrap_or_default()
                    .to_string();
                let is_fixture = path.extension().is_some_and(|ext| ext == EXTENSION);
                if !is_fixture || !self.checked.contains(&name) {
                    self.failures.push(format!(
                        "{}: no sample checks this fixture (was a variant or an operation \
                         removed or renamed? they never are: their bytes may still arrive)",
                        path.display()
                    ));
                }
            }
        }
        for path in &self.written {
            eprintln!("wrote the wire fixture {}", path.display());
        }
        assert!(
            self.failures.is_empty(),
            "wire fixtures of {} differ from today's code:\n- {}",
            self.area,
            self.failures.join("\n- ")
        );
    }

    fn missing(&mut self, name: &str, bytes: &[u8]) {
        let path = self.path(self.current, name);
        if !self.update {
            self.failures.push(format!(
                "{} is missing: a new type or variant needs its fixture; write it with \
                 {UPDATE_ENV}=1 and commit it",
                path.display()
            ));
            return;
        }
        let written = std::fs::create_dir_all(self.folder(self.current))
            .and_then(|()| std::fs::write(&path, bytes));
        match written {
            Ok(()) => self.written.push(path),
            Err(error) => self
                .failures
                .push(format!("writing {}: {error}", path.display())),
        }
    }

    fn folder(&self, version: u16) -> PathBuf {
        self.root.join(version.to_string()).join(&self.area)
    }

    fn path(&self, version: u16, name: &str) -> PathBuf {
        self.folder(version).join(format!("{name}.{EXTENSION}"))
    }

    fn label(&self, name: &str) -> String {
        format!("{}/{name}", self.area)
    }
}

/// What `stored` decodes to (its `Debug` form), if it also encodes back to the same bytes: a
/// type whose `Debug` leaves a field out is still compared whole.
pub fn decode_postcard<T: Serialize + DeserializeOwned + Debug>(
    stored: &[u8],
) -> Result<String, String> {
    let decoded = postcard::from_bytes::<T>(stored).map_err(|error| error.to_string())?;
    let again = postcard::to_stdvec(&decoded).map_err(|error| error.to_string())?;
    if again != stored {
        return Err(format!(
            "it decodes, but encodes back to other bytes ({})",
            hex(&again)
        ));
    }
    Ok(format!("{decoded:?}"))
}

/// `migrations/wire/` of the repository. Found from the crate whose tests run (cargo sets
/// `CARGO_MANIFEST_DIR` for them; every crate is at `crates/<name>`), not from where this crate
/// was compiled: a target directory shared by two clones (CI's and a working copy) keeps the
/// path of whichever built it first.
fn default_root() -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    crate_dir.join("../../migrations/wire")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize)]
    enum Sample {
        Old { value: u32 },
    }

    #[derive(Debug, Serialize, Deserialize)]
    enum Changed {
        Old { value: u64, extra: bool },
    }

    fn temp_root(label: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "herald-wire-fixtures-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    fn failures(golden: Golden) -> String {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| golden.finish()));
        match outcome {
            Ok(()) => String::new(),
            Err(panic) => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn fixtures_are_checked_written_once_and_never_overwritten() {
        let root = temp_root("cycle");
        // Missing, and no update asked: a failure naming the file.
        let mut golden = Golden::at(&root, "area", 1);
        golden.update = false;
        golden.check("old", &Sample::Old { value: 7 });
        assert!(failures(golden).contains("old.bin is missing"));
        assert!(!root.join("1/area/old.bin").exists());

        // Written as the update would.
        std::fs::create_dir_all(root.join("1/area")).unwrap();
        std::fs::write(
            root.join("1/area/old.bin"),
            postcard::to_stdvec(&Sample::Old { value: 7 }).unwrap(),
        )
        .unwrap();
        let mut golden = Golden::at(&root, "area", 1);
        golden.check("old", &Sample::Old { value: 7 });
        assert_eq!(failures(golden), "");

        // A later release still finds it in version 1's folder.
        let mut golden = Golden::at(&root, "area", 2);
        golden.check("old", &Sample::Old { value: 7 });
        assert_eq!(failures(golden), "");

        // The same name with another encoding: refused, and the fixture is untouched.
        let mut golden = Golden::at(&root, "area", 1);
        golden.check(
            "old",
            &Changed::Old {
                value: 7,
                extra: true,
            },
        );
        let failed = failures(golden);
        assert!(failed.contains("frozen"), "{failed}");
        assert_eq!(
            std::fs::read(root.join("1/area/old.bin")).unwrap(),
            postcard::to_stdvec(&Sample::Old { value: 7 }).unwrap()
        );

        // A fixture nothing checks.
        let golden = Golden::at(&root, "area", 1);
        assert!(failures(golden).contains("no sample checks"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
