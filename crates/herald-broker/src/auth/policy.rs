//! Authorization: casbin RBAC over the replicated policy.
//!
//! A rule lets a role do an action on the resources a pattern matches. Resources are
//! `kind:name` (`topic:orders`, `group:billing`, `subscription:audit`, `cluster:nodes`,
//! `auth:clients`); a pattern is a name or a name prefix ending in one `*` (`topic:orders-*`,
//! `group:*`), matched as a prefix (`prefixMatch`, registered with casbin: its own `keyMatch`
//! slices strings by bytes and panics inside a multi-byte character). A principal may act when
//! one of its roles may; nothing is allowed that no rule allows.
//!
//! A resource a request names is checked before any rule is matched against it
//! ([`check_requested`]): a name outside the name alphabet is refused as bad input, and so is an
//! internal topic (`__audit`, whose events are read at `GET /v1/audit` only), whatever the
//! policy grants.
//!
//! The compiled enforcer is read-mostly: a check loads it with one atomic read (no lock) and
//! evaluates it; when the metadata's policy differs from the one compiled, the first check that
//! sees it compiles the new one and swaps it in, so a policy change applies to the next request
//! on every node.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use casbin::{CoreApi, DefaultModel, Enforcer, MemoryAdapter, MgmtApi};

use crate::auth::tokens::Principal;
use crate::broker_core::Core;
use crate::Broker;
use herald_domain::auth::{validate_role, PolicyRule, MAX_POLICY_RULES};
use herald_domain::metadata::MetadataState;
use herald_domain::names::{validate_name, validate_public_topic_name};

/// What a request does to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Append messages (produce, requests, replies).
    Produce,
    /// Read messages and move a consumer's position (fetch, streams, groups, subscriptions).
    Consume,
    /// Create, change or delete the resource.
    Admin,
    /// Read its description.
    View,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Produce,
        Action::Consume,
        Action::Admin,
        Action::View,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Produce => "produce",
            Action::Consume => "consume",
            Action::Admin => "admin",
            Action::View => "view",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The kinds of resources rules name.
pub const RESOURCE_KINDS: [&str; 8] = [
    "topic",
    "subject",
    "group",
    "subscription",
    "producer",
    "cluster",
    "auth",
    "audit",
];

/// The longest resource (pattern) a rule or check names.
pub const MAX_RESOURCE_CHARS: usize = 300;

/// The policy every cluster has until one is set with `PUT /v1/auth/policies`.
pub fn built_in_rules() -> Vec<PolicyRule> {
    let rule = |role: &str, resource: &str, action: &str| PolicyRule {
        role: role.into(),
        resource: resource.into(),
        action: action.into(),
    };
    let mut rules = vec![
        rule("admin", "*", "*"),
        rule("producer", "topic:*", "produce"),
        rule("producer", "topic:*", "view"),
        rule("producer", "cluster:producers", "produce"),
        rule("producer", "producer:*", "produce"),
        // A serializer registers its schema (compatibility-checked) and reads subjects.
        rule("producer", "subject:*", "produce"),
        rule("producer", "subject:*", "view"),
        // A deserializer resolves the schema ids in messages.
        rule("consumer", "subject:*", "view"),
        rule("consumer", "topic:*", "consume"),
        rule("consumer", "topic:*", "view"),
        rule("consumer", "group:*", "consume"),
        rule("consumer", "group:*", "view"),
        rule("consumer", "subscription:*", "consume"),
        rule("consumer", "subscription:*", "view"),
        rule("consumer", "cluster:replies", "produce"),
    ];
    for kind in ["topic", "group", "subscription", "cluster", "subject"] {
        rules.push(rule("viewer", &format!("{kind}:*"), "view"));
    }
    rules.sort();
    rules
}

/// Checks a resource pattern: `*`, or `kind:name` with an optional single trailing `*`.
pub fn validate_resource_pattern(resource: &str) -> Result<(), String> {
    if resource == "*" {
        return Ok(());
    }
    if resource.len() > MAX_RESOURCE_CHARS {
        return Err(format!(
            "a resource has at most {MAX_RESOURCE_CHARS} characters"
        ));
    }
    let Some((kind, name)) = resource.split_once(':') else {
        return Err(format!(
            "resource '{resource}' is not `kind:name` (kinds: {})",
            RESOURCE_KINDS.join(", ")
        ));
    };
    if !RESOURCE_KINDS.contains(&kind) {
        return Err(format!(
            "resource '{resource}' has an unknown kind '{kind}' (kinds: {})",
            RESOURCE_KINDS.join(", ")
        ));
    }
    let prefix = name.strip_suffix('*').unwrap_or(name);
    if prefix.contains('*') {
        return Err(format!(
            "resource '{resource}': `*` may only end a pattern (a name prefix)"
        ));
    }
    if name.is_empty()
        || prefix
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/')))
    {
        return Err(format!(
            "resource '{resource}': a name has letters, digits, `.`, `_`, `-`, `:` and `/` only"
        ));
    }
    Ok(())
}

/// Checks a resource a request names (`kind:name`, or a kind's `kind:*` for listing and
/// creating) before the policy is asked about it: the name is one a client may use (the name
/// alphabet; for topics, not an internal one). The answer is the bad input's description.
pub fn check_requested(resource: &str) -> Result<(), String> {
    let Some((kind, name)) = resource.split_once(':') else {
        return Err(format!("'{resource}' names no resource"));
    };
    if name == "*" {
        return Ok(());
    }
    match kind {
        "topic" => validate_public_topic_name("topic name", name),
        "group" => validate_name("group", name),
        "subscription" => validate_name("subscription name", name),
        "producer" => validate_name("producer name", name),
        "client" => validate_name("client id", name),
        // Confluent's subject names go beyond the name alphabet (`com.acme:Order`, slashes).
        "subject" => herald_domain::schemas::validate_subject_name(name),
        _ => validate_name(kind, name),
    }
}

/// Whether `key` matches `pattern`: equal, or starting with the part of `pattern` before its
/// `*`. What casbin's `keyMatch` computes, comparing bytes, so no name can make it panic.
fn prefix_match(key: &str, pattern: &str) -> bool {
    match pattern.find('*') {
        Some(star) => key.as_bytes().starts_with(&pattern.as_bytes()[..star]),
        None => key == pattern,
    }
}

/// Checks a rule as `PUT /v1/auth/policies` takes it.
pub fn validate_rule(rule: &PolicyRule) -> Result<(), String> {
    validate_role(&rule.role)?;
    validate_resource_pattern(&rule.resource)?;
    if rule.action != "*" && !Action::ALL.iter().any(|a| a.as_str() == rule.action) {
        return Err(format!(
            "unknown action '{}' (produce, consume, admin, view or *)",
            rule.action
        ));
    }
    Ok(())
}

pub fn validate_rules(rules: &[PolicyRule]) -> Result<(), String> {
    if rules.len() > MAX_POLICY_RULES {
        return Err(format!(
            "a policy holds at most {MAX_POLICY_RULES} rules, got {}",
            rules.len()
        ));
    }
    rules.iter().try_for_each(validate_rule)
}

/// Casbin's model: a request (role, resource, action) is allowed when a rule of that role
/// matches the resource (`prefixMatch`: exact, or a prefix before a trailing `*`) and names the
/// action or `*`.
const MODEL: &str = r#"
[request_definition]
r = sub, obj, act

[policy_definition]
p = sub, obj, act

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = r.sub == p.sub && prefixMatch(r.obj, p.obj) && (p.act == "*" || r.act == p.act)
"#;

#[derive(Debug, thiserror::Error)]
#[error("compiling the authorization policy failed: {0}")]
pub struct PolicyError(String);

/// A policy compiled into a casbin enforcer, with the rules it came from.
struct Compiled {
    /// The metadata's policy this was compiled from (`None`: the built-in one).
    source: Option<Vec<PolicyRule>>,
    enforcer: Enforcer,
    /// The last metadata state found to hold `source`: while the metadata is that very state,
    /// a check need not compare the rules (metadata states are immutable snapshots).
    verified: ArcSwapOption<MetadataState>,
}

async fn compile(source: Option<Vec<PolicyRule>>) -> Result<Compiled, PolicyError> {
    let error = |error: casbin::Error| PolicyError(error.to_string());
    let model = DefaultModel::from_str(MODEL).await.map_err(error)?;
    let mut enforcer = Enforcer::new(model, MemoryAdapter::default())
        .await
        .map_err(error)?;
    enforcer.add_function(
        "prefixMatch",
        casbin::function_map::OperatorFunction::Arg2(|key, pattern| {
            prefix_match(
                &casbin::function_map::dynamic_to_str(&key),
                &casbin::function_map::dynamic_to_str(&pattern),
            )
            .into()
        }),
    );
    let rules = source.clone().unwrap_or_else(built_in_rules);
    if !rules.is_empty() {
        enforcer
            .add_policies(
                rules
                    .into_iter()
                    .map(|rule| vec![rule.role, rule.resource, rule.action])
                    .collect(),
            )
            .await
            .map_err(error)?;
    }
    Ok(Compiled {
        source,
        enforcer,
        verified: ArcSwapOption::empty(),
    })
}

/// The authorization checks of a node; cheap to clone.
#[derive(Clone)]
pub struct Authorizer {
    core: Arc<Core>,
    /// Empty until the first check compiles the policy.
    compiled: Arc<ArcSwapOption<Compiled>>,
    /// Serialises recompilation so a policy change is compiled once, not by every request
    /// that notices it. Checks that find the policy current never take it.
    recompiling: Arc<tokio::sync::Mutex<()>>,
}

impl Broker {
    /// The node's authorization checks. Make one per node: it holds the compiled policy.
    pub fn authorizer(&self) -> Authorizer {
        Authorizer {
            core: self.inner.core.clone(),
            compiled: Arc::new(ArcSwapOption::empty()),
            recompiling: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

impl Authorizer {
    /// The rules in force, and whether they are the built-in ones (no policy was ever set).
    pub fn effective_rules(&self) -> (Vec<PolicyRule>, bool) {
        match self.core.cluster().metadata().current().auth.policy.clone() {
            Some(rules) => (rules, false),
            None => (built_in_rules(), true),
        }
    }

    /// Whether `principal` may do `action` on `resource` (`kind:name`).
    pub async fn allows(&self, principal: &Principal, action: Action, resource: &str) -> bool {
        let Some(compiled) = self.current().await else {
            return false;
        };
        compiled.allows(principal, action, resource)
    }

    /// The compiled policy matching the metadata's, compiling it first when it changed.
    async fn current(&self) -> Option<Arc<Compiled>> {
        let metadata = self.core.cluster().metadata().current();
        let compiled = self.compiled.load_full();
        if let Some(compiled) = compiled.as_ref() {
            let verified = compiled.verified.load();
            if verified
                .as_ref()
                .is_some_and(|state| Arc::ptr_eq(state, &metadata))
            {
                return Some(compiled.clone());
            }
            if compiled.source == metadata.auth.policy {
                compiled.verified.store(Some(metadata.clone()));
                return Some(compiled.clone());
            }
        }
        let _recompiling = self.recompiling.lock().await;
        let previous = self.compiled.load_full();
        if let Some(compiled) = previous
            .as_ref()
            .filter(|c| c.source == metadata.auth.policy)
        {
            return Some(compiled.clone());
        }
        match compile(metadata.auth.policy.clone()).await {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                self.compiled.store(Some(fresh.clone()));
                Some(fresh)
            }
            Err(error) => {
                // Rules are validated before they are replicated, so this is a bug; keep
                // enforcing the last policy that compiled (none: deny everything).
                tracing::error!(%error, "keeping the previous authorization policy");
                previous
            }
        }
    }
}

impl Compiled {
    /// Whether one of the principal's roles may. An evaluation that fails, or panics (a bug:
    /// names are checked first and the matcher cannot panic), denies: no request ever sees it.
    fn allows(&self, principal: &Principal, action: Action, resource: &str) -> bool {
        principal.roles.iter().any(|role| {
            let enforced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.enforcer
                    .enforce((role.as_str(), resource, action.as_str()))
            }));
            match enforced {
                Ok(Ok(allowed)) => allowed,
                Ok(Err(error)) => {
                    tracing::error!(%error, "evaluating the authorization policy failed");
                    false
                }
                Err(_) => {
                    tracing::error!(%resource, "evaluating the authorization policy panicked: denied");
                    false
                }
            }
        })
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
