//! confluent-kafka's Python `SchemaRegistryClient` with its Avro, Protobuf and JSON Schema
//! serializers and deserializers, unchanged, against a real node: `tests/schemas/python/
//! confluent_flow.py` registers, evolves, is refused an incompatible change, serializes records,
//! produces them over HTTP into topics whose config names the subjects, is refused what does not
//! follow them (nothing written), reads them back, deserializes them and reads them decoded as
//! JSON.
//!
//! The clients live in a virtual environment of their own, pinned (`scripts/test-deps.sh`,
//! which `make test` runs); without it the test fails and says what to run.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::process;
use crate::common::Server;

/// The flow takes a second or two; room for a loaded machine.
const FLOW_DEADLINE: Duration = Duration::from_secs(120);

/// The virtual environment's Python (`HERALD_TEST_VENV`, as `scripts/test-deps.sh` makes it).
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("HERALD_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/herald-test-venv"));
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/test-deps.sh (make test does) to install confluent-kafka's clients",
        python.display()
    );
    python
}

#[tokio::test]
async fn confluent_serializers_register_produce_and_read_through_herald() {
    let python = venv_python();
    let server = Server::start().await;
    let flow =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemas/python/confluent_flow.py");
    let work = tempfile::tempdir().expect("temporary directory");
    let printed = process::run(
        &server,
        "the confluent-kafka flow",
        &python,
        [flow.as_os_str(), server.base_url().as_ref()],
        work.path(),
        &[],
        FLOW_DEADLINE,
    )
    .await;
    assert!(
        printed.stdout.contains("confluent flow: ok"),
        "{}\n{}",
        printed.stdout,
        printed.stderr
    );
}
