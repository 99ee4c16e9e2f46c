//! Group and queue subscriptions over WebSocket: read `assignment` and `messages` frames
//! with deadlines.

use std::collections::BTreeSet;

use serde_json::Value;

use super::ws::{next_frame, Socket};

/// What a group subscription sent: its latest assignment and the messages so far.
#[derive(Debug, Default)]
pub struct GroupView {
    pub member_id: String,
    pub generation: u64,
    pub assignments: BTreeSet<u32>,
    pub messages: Vec<Value>,
}

impl GroupView {
    /// Takes one frame of subscription `id` (an `assignment` or `messages`); fails on others.
    pub fn take(&mut self, id: &str, frame: Value) {
        assert_eq!(frame["id"], id, "a frame of another subscription: {frame}");
        match frame["op"].as_str() {
            Some("assignment") => {
                self.member_id = frame["member_id"].as_str().expect("member_id").into();
                self.generation = frame["generation"].as_u64().expect("generation");
                self.assignments = frame["assignments"]
                    .as_array()
                    .expect("assignments")
                    .iter()
                    .map(|a| a["partition"].as_u64().expect("partition") as u32)
                    .collect();
            }
            Some("messages") => self.messages.extend(
                frame["messages"]
                    .as_array()
                    .expect("messages")
                    .iter()
                    .cloned(),
            ),
            _ => panic!("unexpected frame {frame}"),
        }
    }

    /// Reads frames until `done` holds (each frame within the frame deadline; at most
    /// 10000 frames).
    pub async fn read_until(
        &mut self,
        socket: &mut Socket,
        id: &str,
        done: impl Fn(&GroupView) -> bool,
    ) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            let frame = next_frame(socket).await;
            self.take(id, frame);
        }
        panic!("still waiting after 10000 frames: {self:?}");
    }
}

/// `(partition, offset)` of delivered messages, sorted.
pub fn positions(messages: &[Value]) -> Vec<(u32, u64)> {
    let mut positions: Vec<(u32, u64)> = messages
        .iter()
        .map(|m| {
            (
                m["partition"].as_u64().expect("partition") as u32,
                m["offset"].as_u64().expect("offset"),
            )
        })
        .collect();
    positions.sort_unstable();
    positions
}
