//! The layer rules, checked: most are crate edges the compiler enforces once they are declared;
//! this test fails when a manifest declares an edge the architecture forbids, when a crate other
//! than the one sealing it names rocksdb or openraft, or when a module of the `herald` crate
//! imports a layer above it (the rules a crate boundary does not cover yet).
//!
//! The map lives in `docs/architecture.md` ("Layers"); change both together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, each with the workspace crates it may depend on (normal and dev
/// dependencies alike): downward only.
const ALLOWED: &[(&str, &[&str])] = &[
    // Golden bytes of the wire: names no Herald crate; the crates owning the types on the wire
    // use it in their tests.
    ("herald-wire-fixtures", &[]),
    ("herald-domain", &["herald-wire-fixtures"]),
    ("herald-storage", &[]),
    // Schemas' parsers, compatibility rules and codecs: pure, below the broker (which
    // validates and decodes messages) and the CLI (which encodes them).
    ("herald-schemas", &[]),
    ("herald-rpc", &[]),
    (
        "herald-raft",
        &[
            "herald-domain",
            "herald-rpc",
            "herald-storage",
            "herald-wire-fixtures",
        ],
    ),
    (
        "herald-cluster",
        &[
            "herald-domain",
            "herald-raft",
            "herald-rpc",
            "herald-storage",
            "herald-wire-fixtures",
        ],
    ),
    ("herald-telemetry", &[]),
    (
        "herald-broker",
        &[
            "herald-cluster",
            "herald-domain",
            "herald-raft",
            "herald-rpc",
            "herald-schemas",
            "herald-storage",
            "herald-telemetry",
            "herald-wire-fixtures",
        ],
    ),
    ("herald-client", &["herald-domain", "herald-schemas"]),
    (
        "herald-api",
        &[
            "herald-broker",
            "herald-domain",
            "herald-rpc",
            "herald-telemetry",
        ],
    ),
    (
        "herald",
        &[
            "herald-api",
            "herald-broker",
            "herald-client",
            "herald-cluster",
            "herald-domain",
            "herald-raft",
            "herald-rpc",
            "herald-storage",
            "herald-telemetry",
        ],
    ),
];

/// Engines sealed inside one crate: no other crate depends on them or names them in code.
const SEALED: &[(&str, &str)] = &[("rocksdb", "herald-storage"), ("openraft", "herald-raft")];

/// Modules of the `herald` crate and the modules above them they must not import.
const MODULE_RULES: &[(&str, &[&str])] = &[("config", &["api", "ws", "app"])];

/// What `config` may take from the transports' crate: its configuration sections, as it takes
/// every layer's (`herald_telemetry::config`), and nothing else.
const CONFIG_MAY_NAME_FROM_API: &[&str] = &["herald_api::ws::config::"];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_manifest(dir: &Path) -> toml::Table {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    text.parse::<toml::Table>()
        .unwrap_or_else(|error| panic!("parsing {}: {error}", path.display()))
}

/// Every workspace member: its package name, its directory, and the names of everything it
/// depends on (normal, dev and build dependencies).
fn members() -> Vec<(String, PathBuf, BTreeSet<String>)> {
    let root = workspace_root();
    let manifest = read_manifest(&root);
    let paths = manifest["workspace"]["members"]
        .as_array()
        .expect("[workspace] members is a list");
    paths
        .iter()
        .map(|path| {
            let dir = root.join(path.as_str().expect("a member is a path"));
            let member = read_manifest(&dir);
            let name = member["package"]["name"]
                .as_str()
                .expect("package.name")
                .to_string();
            let mut dependencies = BTreeSet::new();
            for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(deps) = member.get(table).and_then(|value| value.as_table()) {
                    dependencies.extend(deps.keys().cloned());
                }
            }
            (name, dir, dependencies)
        })
        .collect()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            into.push(path);
        }
    }
}

/// The source a crate compiles: `src/`, plus `tests/` and `benches/` for the root package.
fn sources_of(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for sub in ["src", "tests", "benches"] {
        rust_files(&dir.join(sub), &mut files);
    }
    files
}

#[test]
fn workspace_members_are_the_layers() {
    let expected: BTreeSet<&str> = ALLOWED.iter().map(|(name, _)| *name).collect();
    let found: BTreeSet<String> = members().into_iter().map(|(name, _, _)| name).collect();
    let found: BTreeSet<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(
        found, expected,
        "the workspace's members and this test's layer map differ: update both (and docs/architecture.md)"
    );
}

#[test]
fn crates_depend_only_downward() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut broken = Vec::new();
    for (name, _, dependencies) in members() {
        let permitted = allowed.get(name.as_str()).copied().unwrap_or(&[]);
        for dependency in dependencies.iter().filter(|dep| dep.starts_with("herald")) {
            if !permitted.contains(&dependency.as_str()) {
                broken.push(format!("{name} depends on {dependency}"));
            }
        }
    }
    assert!(broken.is_empty(), "edges the layer map forbids: {broken:?}");
}

#[test]
fn engines_are_sealed_in_their_crate() {
    let mut broken = Vec::new();
    for (name, dir, dependencies) in members() {
        for (engine, owner) in SEALED {
            if name == *owner {
                assert!(
                    dependencies.contains(*engine),
                    "{owner} is expected to depend on {engine}"
                );
                continue;
            }
            if dependencies.contains(*engine) {
                broken.push(format!("{name} depends on {engine}"));
            }
            let needle = format!("{engine}::");
            for file in sources_of(&dir) {
                let text = std::fs::read_to_string(&file).expect("reading a source file");
                if text.lines().any(|line| {
                    let code = line.split("//").next().unwrap_or("");
                    code.contains(&needle)
                }) {
                    broken.push(format!("{} names {engine}", file.display()));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "engines named outside their crate: {broken:?}"
    );
}

#[test]
fn herald_modules_import_only_downward() {
    let src = workspace_root().join("src");
    let mut broken = Vec::new();
    for (module, forbidden) in MODULE_RULES {
        let mut files = Vec::new();
        rust_files(&src.join(module), &mut files);
        let single = src.join(format!("{module}.rs"));
        if single.exists() {
            files.push(single);
        }
        assert!(!files.is_empty(), "src/{module} has no sources");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("reading a source file");
            for above in *forbidden {
                let path = format!("crate::{above}");
                let imports = text.match_indices(&path).any(|(at, _)| {
                    // `crate::api` but not `crate::apis`: the next character ends the name.
                    let next = text[at + path.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if imports {
                    broken.push(format!("{} imports crate::{above}", file.display()));
                }
            }
            if *module == "config" {
                for (at, _) in text.match_indices("herald_api::") {
                    let rest = &text[at..];
                    if !CONFIG_MAY_NAME_FROM_API
                        .iter()
                        .any(|allowed| rest.starts_with(allowed))
                    {
                        let line = rest.lines().next().unwrap_or_default();
                        broken.push(format!("{} names {line}", file.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "imports up the layers: {broken:?}");
}
