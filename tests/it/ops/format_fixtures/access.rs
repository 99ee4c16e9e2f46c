//! Who may do what: the OAuth2 clients, the signing key, the policy, the cluster's members, and
//! the audit log of what they did.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::api::{Api, Tokens};
use super::{array, int, text, ACT_DEADLINE};
use crate::common::auth::{token, token_by_basic};
use crate::common::poll;

/// The clients get tokens signed with the fixture's key (sealed under the cluster secret), the
/// client list, keys and policy are the fixture's, and the policy grants and denies what it
/// did.
pub(super) async fn check_auth(
    api: &Api<'_>,
    expected: &Value,
    dir: &Path,
    layout: &str,
) -> Tokens {
    // The bootstrap admin's credentials are in the founding node's data directory.
    let credentials = std::fs::read_to_string(api.nodes[0].data_dir().join("admin-credentials"))
        .expect("the admin credentials in the first node's data directory");
    assert!(
        credentials.contains(&format!(
            "client_secret={}",
            text(&expected["clients"]["admin"]["client_secret"])
        )),
        "{layout}: {credentials}"
    );
    let kid = text(&expected["jwks"]["keys"][0]["kid"]);
    let mut tokens = Tokens::new();
    for (id, client) in expected["clients"].as_object().expect("clients") {
        let node = api.node();
        let issued = token(node, id, text(&client["client_secret"])).await;
        let header = jsonwebtoken::decode_header(&issued).expect("a JWT");
        assert_eq!(
            header.kid.as_deref(),
            Some(kid),
            "{} ({layout}): {id}'s token is not signed with the fixture's key",
            dir.display()
        );
        tokens.insert(id.clone(), issued);
    }
    let node = api.node();
    let (status, refused) = token_by_basic(node, "fixture-viewer", "not-its-secret").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");

    let admin = &tokens["admin"];
    let jwks = api.get("/oauth/jwks.json", admin).await;
    assert_eq!(jwks, expected["jwks"], "the signing keys");
    let clients = api.get("/v1/auth/clients", admin).await;
    assert_eq!(clients, expected["clients_listed"], "the OAuth2 clients");
    let policy = api.get("/v1/auth/policies", admin).await;
    assert_eq!(policy, expected["policy"], "the policy");

    // What the policy grants and denies (the writes it grants are in `check_new_writes`).
    let writer = &tokens["fixture-orders-writer"];
    api.expect(
        StatusCode::OK,
        Method::GET,
        "/v1/topics/orders",
        writer,
        None,
    )
    .await;
    let (status, answer) = api
        .send(
            Method::POST,
            "/v1/topics/jobs/messages",
            Some(writer),
            Some(&json!({"messages": [{"value": "not allowed"}]})),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["code"], "forbidden", "{answer}");
    let (status, answer) = api
        .send(
            Method::POST,
            "/v1/topics/orders/messages",
            Some(&tokens["fixture-viewer"]),
            Some(&json!({"messages": [{"value": "not allowed"}]})),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    api.expect(
        StatusCode::OK,
        Method::GET,
        "/v1/topics/orders",
        &tokens["fixture-viewer"],
        None,
    )
    .await;
    let (status, answer) = api
        .send(
            Method::POST,
            "/v1/topics",
            Some(&tokens["fixture-consumer"]),
            Some(&json!({"name": "not-allowed"})),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let (status, _) = api.send(Method::GET, "/v1/topics", None, None, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    tokens
}

/// The cluster is the fixture's nodes, with a metadata leader, each registered at the
/// addresses it has now (a lone node's changed; a cluster's nodes keep their raft addresses).
pub(super) async fn check_cluster(api: &Api<'_>, tokens: &Tokens, recorded: &[Value]) {
    let want: BTreeMap<i64, (String, String)> = recorded
        .iter()
        .zip(api.nodes)
        .map(|(node, server)| {
            (
                int(&node["node_id"]),
                (server.raft_addr(), server.http_addr()),
            )
        })
        .collect();
    let seen = poll(ACT_DEADLINE, Duration::from_millis(200), || async {
        let cluster = api.get("/v1/cluster", &tokens["admin"]).await;
        let nodes: BTreeMap<i64, (String, String)> = array(&cluster["nodes"])
            .iter()
            .map(|node| {
                let addresses = (
                    text(&node["raft_addr"]).to_string(),
                    text(&node["http_addr"]).to_string(),
                );
                (int(&node["id"]), addresses)
            })
            .collect();
        if nodes == want && cluster["metadata_leader"].is_u64() {
            Ok(())
        } else {
            Err(cluster.to_string())
        }
    })
    .await;
    if let Err(cluster) = seen {
        panic!("the cluster is not the fixture's nodes at {want:?}: {cluster}");
    }
}

/// The audit log begins with the fixture's events, and this run's refusals follow them.
pub(super) async fn check_audit(api: &Api<'_>, tokens: &Tokens, expected: &Value, since_ms: i64) {
    let recorded = array(&expected["audit"]["events"]);
    let appended = poll(ACT_DEADLINE, Duration::from_millis(250), || async {
        let audit = api
            .get("/v1/audit?since=0&limit=1000", &tokens["admin"])
            .await;
        let events = array(&audit["events"]).clone();
        let ours = events.iter().skip(recorded.len()).any(|event| {
            event["principal"] == "fixture-orders-writer"
                && event["status"] == 403
                && int(&event["at_ms"]) >= since_ms
        });
        if ours {
            Ok(events)
        } else {
            Err(audit.to_string())
        }
    })
    .await;
    let events = appended.unwrap_or_else(|audit| {
        panic!("this run's refused request is not in the audit log after the fixture's: {audit}")
    });
    assert_eq!(
        &events[..recorded.len()],
        &recorded[..],
        "the fixture's audit events"
    );
}
