//! Client and server together over loopback TCP: the test handler and server harness here,
//! the tests in `calls` (what callers see when things work), `failures` (when they do not) and
//! `lanes` (lanes kept apart, calls cancelled), `secret` (the cluster secret and the peer
//! filter in the hello), `versions` (nodes of two releases: hello versions, unknown
//! operations); and property tests of the frame decoder (`frame_props`).
//! Every wait is bounded by [`WAIT`].

mod calls;
mod failures;
mod frame_props;
mod lanes;
mod secret;
mod tls;
mod versions;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

use super::server::serve_counting;
use super::{Lane, RpcClient, RpcError, RpcHandler, RpcLimits, ServiceId};

const WAIT: Duration = Duration::from_secs(5);

const ECHO: ServiceId = 1;
const FAIL: ServiceId = 2;
const PANIC_AT_CALL: ServiceId = 3;
const PANIC_IN_FUTURE: ServiceId = 4;
const SLOW: ServiceId = 5;
const BLOCK: ServiceId = 6;
/// Answers that it does not know the operation whose tag is the body's length.
const UNKNOWN_OPERATION: ServiceId = 7;

const SLOW_HANDLER: Duration = Duration::from_millis(500);

struct TestHandler {
    calls: AtomicUsize,
    /// `BLOCK` requests wait for a permit here.
    gate: Arc<Semaphore>,
    /// `BLOCK` handlers dropped (aborted) before they got through the gate.
    abandoned: Arc<AtomicUsize>,
}

/// Counts a `BLOCK` handler in `abandoned` if it is dropped before it is done.
struct Abandoned {
    count: Arc<AtomicUsize>,
    done: bool,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.done {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl RpcHandler for TestHandler {
    fn handle(
        &self,
        from: u64,
        service: ServiceId,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match service {
            ECHO => async move { Ok(echo(from, service, &body)) }.boxed(),
            FAIL => async move { Err(format!("no such group {}", body.len())) }.boxed(),
            PANIC_AT_CALL => panic!("handler bug at call"),
            PANIC_IN_FUTURE => async move { panic!("handler bug in future") }.boxed(),
            SLOW => async move {
                tokio::time::sleep(SLOW_HANDLER).await;
                Ok(body)
            }
            .boxed(),
            BLOCK => {
                let gate = self.gate.clone();
                let abandoned = Abandoned {
                    count: self.abandoned.clone(),
                    done: false,
                };
                async move {
                    // Moved in whole: the guard lives as long as the handler's future.
                    let mut abandoned = abandoned;
                    let _permit = gate.acquire().await.map_err(|error| error.to_string())?;
                    abandoned.done = true;
                    Ok(body)
                }
                .boxed()
            }
            UNKNOWN_OPERATION => {
                async move { Err(super::operation_tag::unknown_operation(body.len() as u16)) }
                    .boxed()
            }
            other => async move { Err(format!("unknown service {other}")) }.boxed(),
        }
    }
}

fn echo(from: u64, service: ServiceId, body: &[u8]) -> Bytes {
    let mut answer = format!("{from}:{service}:").into_bytes();
    answer.extend_from_slice(body);
    Bytes::from(answer)
}

struct TestServer {
    address: String,
    accepted: Arc<AtomicUsize>,
    handler: Arc<TestHandler>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl TestServer {
    async fn start(node_id: u64, limits: RpcLimits) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        TestServer::start_on(listener, node_id, limits)
    }

    fn start_on(listener: TcpListener, node_id: u64, limits: RpcLimits) -> TestServer {
        let address = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(TestHandler {
            calls: AtomicUsize::new(0),
            gate: Arc::new(Semaphore::new(0)),
            abandoned: Arc::new(AtomicUsize::new(0)),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_counting(
            listener,
            node_id,
            handler.clone(),
            limits,
            async move {
                let _ = stopped.await;
            },
            accepted.clone(),
        ));
        TestServer {
            address,
            accepted,
            handler,
            stop,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn calls(&self) -> usize {
        self.handler.calls.load(Ordering::SeqCst)
    }

    fn abandoned(&self) -> usize {
        self.handler.abandoned.load(Ordering::SeqCst)
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the server stops in time")
            .unwrap();
    }
}

fn client_of(node: u64, server: &TestServer, limits: RpcLimits) -> RpcClient {
    let client = RpcClient::new(1, limits);
    client.set_address(node, &server.address);
    client
}

async fn call(
    client: &RpcClient,
    node: u64,
    service: ServiceId,
    body: &'static [u8],
) -> Result<Bytes, RpcError> {
    client
        .call(node, Lane::Control, service, Bytes::from_static(body), WAIT)
        .await
}

async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    condition()
}

/// Reads until the server closes the stream; false if it is still open after [`WAIT`].
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 1024];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_elapsed) => return false,
        }
    }
}
