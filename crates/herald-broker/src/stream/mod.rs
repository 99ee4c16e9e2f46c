//! Live streams of a topic's messages, shared by every push transport (server-sent events,
//! WebSocket): where a stream starts ([`StartFrom`]), the resume token it hands out with every
//! message ([`Positions`]), and the reader that follows the partitions ([`Tail`]), sharing
//! reads at the tail among the node's streams ([`TailHub`]), and the one retry policy every
//! push stream follows across leader changes ([`Retry`]), with the group member and queue lease
//! streams that follow it themselves ([`ResumingMember`], [`ResumingLeases`]).

mod follow;
mod hub;
#[cfg(test)]
mod hub_tests;
mod position;
mod resume;
pub mod retry;
mod tail;

pub use hub::{TailHub, TAIL_POLL_WAIT};
pub use position::{Positions, StartFrom, MAX_TOKEN_LEN};
pub use resume::{ResumingLeases, ResumingMember};
pub use retry::Retry;
pub use tail::{StreamService, Tail, TailItem};
