//! Golden byte fixtures of what Herald nodes send each other and replicate: one sample of every
//! RPC request and reply of the raft, cluster and broker services and of every raft entry
//! variant, as the release that introduced it encoded it.
//!
//! They live in `migrations/wire/<wire version>/<area>/<name>.bin` (see `migrations/README.md`):
//! a fixture sits in the folder of the wire version that introduced its type or variant, and
//! every later release keeps decoding it. The tests of the crate that owns a type call
//! [`Golden::check`] for each sample and [`Golden::finish`] at the end:
//!
//! - a fixture must decode, with today's code, to the sample (compared by its `Debug` form,
//!   since not every type on the wire is `PartialEq`, or for a type with fields that do not
//!   travel by what does: [`Compare`]) and encode back to its bytes, and today's encoding of
//!   the sample must be the fixture's bytes exactly: a changed encoding of an existing type
//!   fails;
//! - a sample without a fixture fails, unless `HERALD_UPDATE_WIRE_FIXTURES=1`, which writes it
//!   into the current wire version's folder. It never overwrites a fixture: an encoding that
//!   changed must be a new tag or variant, not a rewritten fixture;
//! - a fixture that no sample checks fails too (a variant was removed or renamed).
//!
//! [`assert_covers_every_variant`] checks that a list of samples has one of every variant of an
//! enum, as serde's derive lists them, so a new variant without a sample fails a test; the
//! names come from exhaustive `match`es in the owners' tests, so a new variant without a name
//! fails to compile.
//!
//! This crate is a dev-dependency only and names no Herald crate.

mod golden;
mod variants;

pub use golden::{decode_postcard, Compare, Golden, UPDATE_ENV};
pub use variants::{assert_covers_every_variant, variant_index, variant_names};
