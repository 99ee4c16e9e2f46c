use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::storage::StoreOptions;

fn open(dir: &Path) -> Store {
    Store::open(&StoreOptions::new(dir)).expect("open a store")
}

fn write_u64(store: &Store, key: &[u8], value: u64) {
    let mut writes = WriteSet::new();
    writes.put(Cf::Node, key.to_vec(), value.to_be_bytes().to_vec());
    store.write(writes, true).unwrap();
}

fn stored_format(store: &Store) -> Option<u64> {
    read_u64(store, FORMAT_VERSION_KEY, "format version").unwrap()
}

/// A directory as a node of `format` left it: its id and its format.
fn directory_of_format(dir: &Path, format: Option<u64>) -> Store {
    let store = open(dir);
    write_u64(&store, NODE_ID_KEY, 1);
    if let Some(format) = format {
        write_u64(&store, FORMAT_VERSION_KEY, format);
    }
    store
}

fn refusal(store: &Store, dir: &Path) -> String {
    open_data_dir(store, 1, dir).unwrap_err().to_string()
}

#[test]
fn a_data_directory_remembers_its_node_and_format() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert_eq!(
        open_data_dir(&store, 3, dir.path()).unwrap(),
        Opened::Created
    );
    assert_eq!(stored_format(&store), Some(FORMAT_VERSION));
    assert_eq!(
        open_data_dir(&store, 3, dir.path()).unwrap(),
        Opened::Current
    );
    let error = open_data_dir(&store, 4, dir.path()).unwrap_err();
    assert!(error.to_string().contains("belongs to node 3"), "{error}");
}

#[test]
fn pre_release_formats_are_refused_with_what_to_do() {
    for format in [None, Some(4), Some(FIRST_SUPPORTED_FORMAT - 1)] {
        let dir = tempfile::tempdir().unwrap();
        let store = directory_of_format(dir.path(), format);
        let error = refusal(&store, dir.path());
        let shown = format.unwrap_or(1);
        assert!(
            error.contains(&format!("on-disk format {shown}, a pre-release format")),
            "{error}"
        );
        assert!(error.contains("empty data directory"), "{error}");
        // Nothing was written or copied.
        assert_eq!(stored_format(&store), format);
        assert_eq!(checkpoints_beside(dir.path()).len(), 0);
    }
}

#[test]
fn a_newer_format_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = directory_of_format(dir.path(), Some(FORMAT_VERSION + 1));
    let error = refusal(&store, dir.path());
    assert!(
        error.contains(&format!(
            "on-disk format {}, newer than format {FORMAT_VERSION}",
            FORMAT_VERSION + 1
        )),
        "{error}"
    );
    assert!(error.contains("written by a later release"), "{error}");
    assert_eq!(stored_format(&store), Some(FORMAT_VERSION + 1));
}

/// How many times each test step ran.
static FIRST_RUNS: AtomicUsize = AtomicUsize::new(0);
static SECOND_RUNS: AtomicUsize = AtomicUsize::new(0);
static BROKEN_RUNS: AtomicUsize = AtomicUsize::new(0);

fn first_step(store: &Store) -> anyhow::Result<String> {
    FIRST_RUNS.fetch_add(1, Ordering::SeqCst);
    let mut writes = WriteSet::new();
    writes.put(Cf::Node, b"first".to_vec(), b"done".to_vec());
    store.write(writes, true)?;
    Ok("wrote the first key".into())
}

fn second_step(store: &Store) -> anyhow::Result<String> {
    SECOND_RUNS.fetch_add(1, Ordering::SeqCst);
    let mut writes = WriteSet::new();
    writes.put(Cf::Node, b"second".to_vec(), b"done".to_vec());
    store.write(writes, true)?;
    Ok("wrote the second key".into())
}

fn broken_step(_store: &Store) -> anyhow::Result<String> {
    BROKEN_RUNS.fetch_add(1, Ordering::SeqCst);
    anyhow::bail!("the old rows do not parse")
}

const FIRST: Migration = Migration {
    what: "the first test change",
    run: first_step,
};
const SECOND: Migration = Migration {
    what: "the second test change",
    run: second_step,
};
const BROKEN: Migration = Migration {
    what: "a change whose step fails",
    run: broken_step,
};

/// The directories `upgrade_with` put beside `data_dir`.
fn checkpoints_beside(data_dir: &Path) -> Vec<std::path::PathBuf> {
    let name = data_dir.file_name().unwrap().to_string_lossy().to_string();
    let mut found: Vec<_> = std::fs::read_dir(data_dir.parent().unwrap())
        .unwrap()
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name().is_some_and(|file| {
                file.to_string_lossy()
                    .starts_with(&format!("{name}.format-"))
            })
        })
        .collect();
    found.sort();
    found
}

/// One test, because the step counters are shared statics.
#[test]
fn an_older_format_is_checkpointed_then_migrated_step_by_step_and_resumes_after_a_failure() {
    let parent = tempfile::tempdir().unwrap();
    let data_dir = parent.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    std::fs::write(
        data_dir.join(crate::cluster_secret::DEFAULT_FILE_NAME),
        b"secret",
    )
    .unwrap();
    let store = directory_of_format(&data_dir, Some(FIRST_SUPPORTED_FORMAT));
    let mut before = WriteSet::new();
    before.put(Cf::Node, b"old".to_vec(), b"row".to_vec());
    store.write(before, true).unwrap();

    // Two steps, the second broken: the first is recorded, the directory stays one format
    // short, and the error says where and what to roll back to.
    let error = upgrade_with(&store, 1, &data_dir, &[FIRST, BROKEN]).unwrap_err();
    let message = format!("{error:#}");
    assert!(message.contains("a change whose step fails"), "{message}");
    assert!(message.contains("the old rows do not parse"), "{message}");
    assert!(
        message.contains(&format!("still in format {}", FIRST_SUPPORTED_FORMAT + 1)),
        "{message}"
    );
    assert_eq!(stored_format(&store), Some(FIRST_SUPPORTED_FORMAT + 1));
    let checkpoints = checkpoints_beside(&data_dir);
    assert_eq!(checkpoints.len(), 1, "{checkpoints:?}");
    assert!(
        message.contains(&checkpoints[0].display().to_string()),
        "{message}"
    );

    // The fixed release resumes where the broken one stopped: the first step does not run
    // again, and a second checkpoint is taken (of the half-upgraded directory).
    let opened = upgrade_with(&store, 1, &data_dir, &[FIRST, SECOND]).unwrap();
    let Opened::Upgraded { from, checkpoint } = opened else {
        panic!("expected an upgrade, got {opened:?}");
    };
    assert_eq!(from, FIRST_SUPPORTED_FORMAT + 1);
    assert_eq!(FIRST_RUNS.load(Ordering::SeqCst), 1);
    assert_eq!(SECOND_RUNS.load(Ordering::SeqCst), 1);
    assert_eq!(BROKEN_RUNS.load(Ordering::SeqCst), 1);
    assert_eq!(stored_format(&store), Some(FIRST_SUPPORTED_FORMAT + 2));
    assert_eq!(
        store.get(Cf::Node, b"second").unwrap(),
        Some(b"done".to_vec())
    );
    assert_eq!(checkpoints_beside(&data_dir).len(), 2);
    assert!(
        checkpoint.starts_with(parent.path()),
        "{}",
        checkpoint.display()
    );
    // Once upgraded, nothing more happens.
    assert_eq!(
        upgrade_with(&store, 1, &data_dir, &[FIRST, SECOND]).unwrap(),
        Opened::Current
    );

    // The first checkpoint is the directory as the previous release left it: its format, its
    // rows, none of the migration's, and the cluster secret beside them.
    let rollback = open(&checkpoints[0]);
    assert_eq!(stored_format(&rollback), Some(FIRST_SUPPORTED_FORMAT));
    assert_eq!(
        rollback.get(Cf::Node, b"old").unwrap(),
        Some(b"row".to_vec())
    );
    assert_eq!(rollback.get(Cf::Node, b"first").unwrap(), None);
    assert_eq!(
        std::fs::read(checkpoints[0].join(crate::cluster_secret::DEFAULT_FILE_NAME)).unwrap(),
        b"secret"
    );
}

/// From the first supported format on, every format has its migration step (the constant is
/// derived from them) and its fixture, written by the release that wrote the format.
#[test]
fn every_supported_format_has_a_fixture() {
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for format in FIRST_SUPPORTED_FORMAT..=FORMAT_VERSION {
        let manifest_path = migrations.join(format.to_string()).join("manifest.json");
        let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_else(|error| {
            panic!(
                "format {format} has no fixture ({}: {error}): a format change needs its \
                 migration step in src/format/steps.rs and the fixture the release before it \
                 writes (see migrations/README.md)",
                manifest_path.display()
            )
        });
        let manifest: serde_json::Value = serde_json::from_str(&manifest)
            .unwrap_or_else(|error| panic!("{}: {error}", manifest_path.display()));
        assert_eq!(
            manifest["format"].as_u64(),
            Some(format),
            "{}: {manifest}",
            manifest_path.display()
        );
    }
}
