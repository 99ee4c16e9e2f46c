//! Authentication, authorization, audit, TLS and quotas.

mod audit;
mod authz;
mod bootstrap_admin;
mod oauth;
mod oidc;
mod quotas;
mod tls;
