//! The policy's rules, matcher and checks of requested resources.

use super::*;

fn principal(roles: &[&str]) -> Principal {
    Principal {
        subject: "test".into(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        expires_at_ms: i64::MAX,
    }
}

async fn check(
    source: Option<Vec<PolicyRule>>,
    roles: &[&str],
    action: Action,
    resource: &str,
) -> bool {
    let compiled = compile(source).await.unwrap();
    compiled.allows(&principal(roles), action, resource)
}

#[tokio::test]
async fn built_in_roles_have_their_documented_rights() {
    use Action::*;
    let cases: &[(&str, Action, &str, bool)] = &[
        ("admin", Admin, "auth:policies", true),
        ("admin", Produce, "topic:orders", true),
        ("producer", Produce, "topic:orders", true),
        ("producer", View, "topic:orders", true),
        ("producer", Consume, "topic:orders", false),
        ("producer", Admin, "topic:orders", false),
        ("consumer", Consume, "topic:orders", true),
        ("consumer", Consume, "group:billing", true),
        ("consumer", Consume, "subscription:billing", true),
        ("consumer", Produce, "topic:orders", false),
        ("viewer", View, "topic:orders", true),
        ("viewer", View, "cluster:info", true),
        ("viewer", View, "auth:clients", false),
        ("viewer", Consume, "topic:orders", false),
        ("nobody", View, "topic:orders", false),
        ("producer", Produce, "producer:ingest", true),
        ("consumer", Produce, "producer:ingest", false),
    ];
    for (role, action, resource, allowed) in cases {
        assert_eq!(
            check(None, &[role], *action, resource).await,
            *allowed,
            "{role} {action} {resource}"
        );
    }
    assert!(check(None, &["viewer", "producer"], Action::Produce, "topic:x").await);
}

#[tokio::test]
async fn patterns_scope_rules_by_name_prefix() {
    let rules = vec![PolicyRule {
        role: "orders-writer".into(),
        resource: "topic:orders-*".into(),
        action: "produce".into(),
    }];
    let source = Some(rules);
    assert!(
        check(
            source.clone(),
            &["orders-writer"],
            Action::Produce,
            "topic:orders-eu"
        )
        .await
    );
    assert!(
        !check(
            source.clone(),
            &["orders-writer"],
            Action::Produce,
            "topic:payments"
        )
        .await
    );
    assert!(
        !check(
            source.clone(),
            &["orders-writer"],
            Action::Produce,
            "topic:orders"
        )
        .await
    );
    assert!(
        !check(
            source.clone(),
            &["orders-writer"],
            Action::View,
            "topic:orders-eu"
        )
        .await
    );
    // A set policy replaces the built-in one: deny by default.
    assert!(!check(source, &["admin"], Action::View, "topic:orders-eu").await);
    assert!(!check(Some(vec![]), &["admin"], Action::View, "topic:x").await);
}

#[tokio::test]
async fn no_name_makes_the_matcher_panic() {
    let rules = vec![PolicyRule {
        role: "reader".into(),
        resource: "topic:orders-*".into(),
        action: "view".into(),
    }];
    let compiled = compile(Some(rules)).await.unwrap();
    // `topic:orders-*`'s `*` is at byte 13, inside the `é` of this name.
    for resource in [
        "topic:ordersé1",
        "topic:orders\u{10348}",
        "topic:é",
        "topic:",
    ] {
        assert!(!compiled.allows(&principal(&["reader"]), Action::View, resource));
    }
    assert!(compiled.allows(&principal(&["reader"]), Action::View, "topic:orders-é"));
    assert!(prefix_match("topic:orders-", "topic:orders-*"));
    assert!(!prefix_match("topic:orders", "topic:orders-*"));
    assert!(prefix_match("anything", "*"));
}

#[test]
fn requested_resources_are_names_a_client_may_use() {
    for good in [
        "topic:orders",
        "topic:*",
        "group:billing",
        "subscription:jobs",
        "producer:ingest-1",
        "cluster:info",
        "audit:log",
        "auth:clients",
    ] {
        assert_eq!(check_requested(good), Ok(()), "{good}");
    }
    for bad in [
        "topic:ordersé1",
        "topic:__audit",
        "topic:",
        "group:a b",
        "subscription:é",
        "producer:x/y",
        "cluster:é",
        "orders",
    ] {
        assert!(check_requested(bad).is_err(), "{bad}");
    }
    let reserved = check_requested("topic:__audit").unwrap_err();
    assert!(reserved.contains("reserved"), "{reserved}");
}

#[test]
fn rules_are_validated() {
    let rule = |resource: &str, action: &str| PolicyRule {
        role: "r".into(),
        resource: resource.into(),
        action: action.into(),
    };
    for good in [
        rule("*", "*"),
        rule("topic:orders-*", "produce"),
        rule("group:*", "consume"),
        rule("subscription:billing", "view"),
        rule("cluster:*", "admin"),
        rule("producer:orders-*", "produce"),
    ] {
        validate_rule(&good).unwrap();
    }
    for bad in [
        rule("topic:orders", "write"),
        rule("orders", "produce"),
        rule("queue:x", "produce"),
        rule("topic:*-eu", "produce"),
        rule("topic:", "produce"),
        rule("topic:a b", "produce"),
    ] {
        assert!(validate_rule(&bad).is_err(), "{bad:?}");
    }
    assert!(validate_rules(&built_in_rules()).is_ok());
}
