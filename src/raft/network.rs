//! The raft network of a node. Herald's groups have a single voter until clustering adds the
//! internal RPC listener (`--raft-addr`), so every peer is unreachable here: a single-voter
//! group never calls it, and a misconfigured membership fails loudly instead of hanging.

use std::future::Future;

use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RaftNetworkV2};

use super::types::{NodeAddr, Snapshot, TypeConfig, Vote};

#[derive(Debug, Clone, Default)]
pub struct NetworkFactory;

pub struct PeerClient {
    target: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("node {0} is not reachable: this build has no internal RPC yet")]
struct NoTransport(u64);

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, _node: &NodeAddr) -> Self::Network {
        PeerClient { target }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoTransport(
            self.target,
        ))))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoTransport(
            self.target,
        ))))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(Unreachable::new(&NoTransport(
            self.target,
        ))))
    }
}
