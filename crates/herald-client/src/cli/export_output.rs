//! Where an export goes: a file, written under a temporary name and renamed once complete (so
//! a file at the given path is always a whole export), or stdout.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Stdout, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Buffer of the output: frames are written a batch at a time.
const BUFFER: usize = 1 << 20;

/// An export's output, counting the bytes written.
pub enum Output {
    File {
        out: BufWriter<File>,
        /// Where it is written until complete; removed unless committed.
        partial: Partial,
        /// Where it goes once complete.
        path: PathBuf,
        written: u64,
    },
    Stdout {
        out: BufWriter<Stdout>,
        written: u64,
    },
}

impl Output {
    /// The output for `--output` (`None` or `-`: stdout). An existing file is refused unless
    /// `force`.
    pub fn create(path: Option<&Path>, force: bool) -> anyhow::Result<Output> {
        let Some(path) = path.filter(|path| path.as_os_str() != "-") else {
            return Ok(Output::Stdout {
                out: BufWriter::with_capacity(BUFFER, std::io::stdout()),
                written: 0,
            });
        };
        if !force && path.exists() {
            anyhow::bail!("{} exists already (--force replaces it)", path.display());
        }
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        Ok(Output::File {
            out: BufWriter::with_capacity(BUFFER, file),
            partial: Partial(Some(partial)),
            path: path.to_path_buf(),
            written: 0,
        })
    }

    /// How the summary names it.
    pub fn describe(&self) -> String {
        match self {
            Output::File { path, .. } => path.display().to_string(),
            Output::Stdout { .. } => "standard output".to_string(),
        }
    }

    /// Makes the export durable and visible: a file is flushed, synced and renamed to its
    /// path. Answers the bytes written.
    pub fn commit(self) -> anyhow::Result<u64> {
        match self {
            Output::Stdout { mut out, written } => {
                out.flush().context("cannot write to standard output")?;
                Ok(written)
            }
            Output::File {
                out,
                mut partial,
                path,
                written,
            } => {
                let file = out
                    .into_inner()
                    .map_err(|error| error.into_error())
                    .with_context(|| format!("cannot write {}", partial.display()))?;
                file.sync_all()
                    .with_context(|| format!("cannot sync {}", partial.display()))?;
                std::fs::rename(partial.path(), &path).with_context(|| {
                    format!("cannot rename {} to {}", partial.display(), path.display())
                })?;
                partial.0 = None;
                // The rename itself reaches the disk with its directory; a failure to sync the
                // directory leaves a complete file that may need the rename again after a crash.
                if let Some(directory) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                    let _ = File::open(directory).and_then(|dir| dir.sync_all());
                }
                Ok(written)
            }
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (written, count) = match self {
            Output::File { out, written, .. } => (out.write(buf)?, written),
            Output::Stdout { out, written } => (out.write(buf)?, written),
        };
        *count += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::File { out, .. } => out.flush(),
            Output::Stdout { out, .. } => out.flush(),
        }
    }
}

/// The temporary file of an export being written: an export that does not complete leaves
/// nothing behind, at its path nor beside it.
pub struct Partial(Option<PathBuf>);

impl Partial {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    fn display(&self) -> std::path::Display<'_> {
        self.path().display()
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "herald-export-output-{}-{}",
            std::process::id(),
            super::super::archive_ids::new_export_id()
        ));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    #[test]
    fn a_file_appears_only_once_committed_and_is_not_replaced_unasked() {
        let dir = scratch();
        let path = dir.join("orders.hlx");
        let mut output = Output::create(Some(&path), false).expect("created");
        output.write_all(b"abc").expect("written");
        assert!(!path.exists(), "not there before the commit");
        assert_eq!(output.commit().expect("committed"), 3);
        assert_eq!(std::fs::read(&path).expect("read"), b"abc");
        assert!(!dir.join("orders.hlx.partial").exists());

        assert!(Output::create(Some(&path), false).is_err());
        let mut abandoned = Output::create(Some(&path), true).expect("forced");
        abandoned.write_all(b"xyz").expect("written");
        drop(abandoned);
        assert_eq!(std::fs::read(&path).expect("read"), b"abc", "kept");
        assert!(!dir.join("orders.hlx.partial").exists(), "cleaned up");
        let _ = std::fs::remove_dir_all(dir);
    }
}
