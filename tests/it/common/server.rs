//! One `herald serve` process under test: its temporary data directory, its free loopback
//! ports, starting it (retrying when a port turned out to be taken), restarting it on the same
//! directory and ports, signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM) and its log files, whose
//! tail every failure prints. Kept apart from the HTTP helpers, which only need a running node.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use reqwest::StatusCode;
use tempfile::TempDir;

use super::client;

/// How long a node gets to answer `GET /readyz` with 200 after it is started.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How long a node gets to exit after SIGTERM.
pub const STOP_DEADLINE: Duration = Duration::from_secs(20);
/// How many times a start is retried when a port turned out to be taken.
const START_ATTEMPTS: usize = 5;

/// One running `herald serve` process, its data directory and its ports.
pub struct Server {
    child: Option<Child>,
    /// Stopped with SIGSTOP and not continued yet.
    paused: bool,
    dir: TempDir,
    node_id: u64,
    /// The loopback address both listeners bind (and the node dials its peers from).
    ip: IpAddr,
    http_port: u16,
    raft_port: u16,
    extra_args: Vec<String>,
    /// Environment variables the process gets (besides the harness's own).
    env: Vec<(String, String)>,
    /// Whether dropping it in a failed test repeats the failure after the log tail (a
    /// cluster repeats it once, after all its nodes').
    pub(super) repeats_failure: bool,
    /// The file mode creation mask the process starts with (the runner's own when `None`).
    umask: Option<u32>,
    /// Logs of this and earlier runs (one file per start), newest last.
    logs: Vec<PathBuf>,
    client: reqwest::Client,
    /// Set when the node's client port speaks TLS: how to reach it (readiness is probed over
    /// it, and `base_url` says https).
    https: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// Two distinct ports that were free a moment ago (bind port 0, read it, release it).
fn free_ports() -> (u16, u16) {
    let ports = free_port_list(2);
    (ports[0], ports[1])
}

/// `count` distinct ports of 127.0.0.1 that were free a moment ago.
pub fn free_port_list(count: usize) -> Vec<u16> {
    free_ports_on(LOCALHOST, count)
}

/// `count` distinct ports of `ip` that were free a moment ago (all bound at once, then
/// released).
pub fn free_ports_on(ip: IpAddr, count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| {
            TcpListener::bind((ip, 0))
                .unwrap_or_else(|err| panic!("bind a free port of {ip}: {err}"))
        })
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// What a start waits for before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// `GET /readyz` answers 200.
    Ready,
    /// `GET /healthz` answers 200 (the process serves HTTP, ready or not).
    Healthy,
}

/// The last `lines` lines of a file, or a note that it cannot be read.
pub fn tail(path: &Path, lines: usize) -> String {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) => return format!("<cannot open {}: {err}>", path.display()),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    let _ = file.seek(SeekFrom::Start(start));
    let mut text = String::new();
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    text.push_str(&String::from_utf8_lossy(&bytes));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn looks_like_bind_failure(log: &str) -> bool {
    let log = log.to_ascii_lowercase();
    log.contains("address already in use")
        || log.contains("addrinuse")
        || log.contains("os error 98")
}

impl Server {
    /// Starts a node with default settings and waits until it is ready.
    pub async fn start() -> Server {
        Server::start_with(&[]).await
    }

    /// Starts a node with extra `serve` arguments (e.g. `["--max-body-bytes", "65536"]`).
    pub async fn start_with(extra_args: &[&str]) -> Server {
        let args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        Server::prepare(1, 0, 0, args).start_on_free_ports().await
    }

    /// Starts a node with extra `serve` arguments and environment variables.
    pub async fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> Server {
        let args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let mut server = Server::prepare(1, 0, 0, args);
        for (name, value) in env {
            server.set_env(name, value);
        }
        server.start_on_free_ports().await
    }

    /// Starts a prepared node on free ports and waits until it is ready.
    pub async fn start_on_free_ports(self) -> Server {
        let mut server = self;
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let (http, raft) = free_ports();
            server.http_port = http;
            server.raft_port = raft;
            match server.spawn_and_wait(Wait::Ready).await {
                Ok(()) => return server,
                Err(StartError::Bind(log)) => last_error = log,
                Err(StartError::Other(message)) => server.fail(&message),
            }
        }
        panic!("herald could not bind its ports after {START_ATTEMPTS} attempts:\n{last_error}");
    }

    /// A node that is not started yet, on 127.0.0.1: see [`Server::prepare_on`].
    pub fn prepare(
        node_id: u64,
        http_port: u16,
        raft_port: u16,
        extra_args: Vec<String>,
    ) -> Server {
        Server::prepare_on(LOCALHOST, node_id, http_port, raft_port, extra_args)
    }

    /// A node that is not started yet: its own temporary directory, this loopback address and
    /// ports, and `serve` arguments (after `--data-dir`, `--http-addr`, `--raft-addr` and
    /// `--node-id`).
    pub fn prepare_on(
        ip: IpAddr,
        node_id: u64,
        http_port: u16,
        raft_port: u16,
        extra_args: Vec<String>,
    ) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("herald-test-")
            .tempdir()
            .expect("create a temporary directory");
        Server {
            child: None,
            paused: false,
            dir,
            node_id,
            ip,
            http_port,
            raft_port,
            extra_args,
            env: Vec::new(),
            repeats_failure: true,
            umask: None,
            logs: Vec::new(),
            client: client(),
            https: None,
        }
    }

    /// The node's client port speaks TLS that `config` trusts.
    pub fn set_https(&mut self, config: std::sync::Arc<rustls::ClientConfig>) {
        self.https = Some(config);
    }

    /// Replaces the extra `serve` arguments used by the next start.
    pub fn set_extra_args(&mut self, extra_args: Vec<String>) {
        self.extra_args = extra_args;
    }

    /// Gives the process the environment variable `name` (from its next start on).
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(existing, _)| existing != name);
        self.env.push((name.to_string(), value.to_string()));
    }

    /// Takes the environment variable `name` away from the process (from its next start on).
    pub fn remove_env(&mut self, name: &str) {
        self.env.retain(|(existing, _)| existing != name);
    }

    /// Starts the process with this file mode creation mask (from its next start on).
    pub fn set_umask(&mut self, umask: u32) {
        self.umask = Some(umask);
    }

    /// Starts the process again on the same data directory and ports (after `kill` or `stop`).
    pub async fn restart(&mut self) {
        self.restart_until(Wait::Ready).await
    }

    /// `restart`, returning once the node reaches `wait`.
    pub async fn restart_until(&mut self, wait: Wait) {
        if self.child.is_some() {
            self.kill();
        }
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            match self.spawn_and_wait(wait).await {
                Ok(()) => return,
                // The old process's sockets may linger for a moment; the ports are ours.
                Err(StartError::Bind(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(StartError::Bind(log)) => self.fail(&format!("restart could not bind:\n{log}")),
                Err(StartError::Other(message)) => self.fail(&message),
            }
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--http-addr")
            .arg(self.http_addr())
            .arg("--raft-addr")
            .arg(self.raft_addr())
            .arg("--node-id")
            .arg(self.node_id.to_string())
            .args(&self.extra_args);
        // The environment of whoever runs the tests must not configure the node under test.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("HERALD_") {
                command.env_remove(name);
            }
        }
        // Text lines (the default for a log file would be JSON): the failure output quotes
        // them and some tests look for a message. A test's own `--log-format` wins.
        command.env("HERALD_LOG_FORMAT", "text");
        command.env("NO_COLOR", "1");
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(mask) = self.umask {
            use std::os::unix::process::CommandExt;
            // SAFETY: umask(2) is async-signal-safe and touches nothing else of the process.
            unsafe {
                command.pre_exec(move || {
                    libc::umask(mask as libc::mode_t);
                    Ok(())
                });
            }
        }
        command.stdin(Stdio::null());
        command
    }

    async fn spawn_and_wait(&mut self, wait: Wait) -> Result<(), StartError> {
        self.spawn();
        self.wait_started(wait, READY_DEADLINE).await
    }

    /// Starts the process (its output goes to a new log file) without waiting for anything.
    pub fn spawn(&mut self) {
        super::failure::record_panics();
        assert!(
            self.child.is_none(),
            "node {} is already running",
            self.node_id
        );
        let log_path = self
            .dir
            .path()
            .join(format!("herald-{}.log", self.logs.len()));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("create the server log file");
        let log_err = log.try_clone().expect("clone the log file handle");
        self.logs.push(log_path.clone());
        let child = self
            .command()
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", env!("CARGO_BIN_EXE_herald")));
        self.child = Some(child);
        self.paused = false;
    }

    /// Waits until the process just spawned reaches `wait`; an exit complaining about a taken
    /// address is a [`StartError::Bind`].
    pub async fn wait_started(&mut self, wait: Wait, within: Duration) -> Result<(), StartError> {
        let deadline = Instant::now() + within;
        let path = match wait {
            Wait::Ready => "/readyz",
            Wait::Healthy => "/healthz",
        };
        let url = format!("{}{path}", self.base_url());
        let probe = herald_client::cli::http_client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        loop {
            if let Some(error) = self.check_exited() {
                return Err(error);
            }
            match &self.https {
                Some(tls) => {
                    let address = self.http_addr().parse().expect("a socket address");
                    if let Ok((200, _)) = super::tls::https_get(address, tls.clone(), path).await {
                        return Ok(());
                    }
                }
                None => {
                    if let Ok(response) = probe.get(&url).send().await {
                        if response.status() == StatusCode::OK {
                            return Ok(());
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(StartError::Other(format!(
                    "herald node {} did not answer GET {path} with 200 within {within:?}",
                    self.node_id
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `Some` when the process started last has exited: a [`StartError::Bind`] when its log
    /// complains about a taken address. `None` while it runs (or when it is not started).
    pub fn check_exited(&mut self) -> Option<StartError> {
        let status = self.child.as_mut()?.try_wait().expect("poll the child")?;
        self.child = None;
        self.paused = false;
        let log = self
            .logs
            .last()
            .map(|path| tail(path, 80))
            .unwrap_or_default();
        if looks_like_bind_failure(&log) {
            return Some(StartError::Bind(log));
        }
        Some(StartError::Other(format!(
            "herald node {} exited with {status}",
            self.node_id
        )))
    }

    /// Panics with `message` and the tail of the current log.
    pub fn fail(&self, message: &str) -> ! {
        panic!("{message}\n{}", self.log_tail());
    }

    /// The tail of the newest log file, framed for a panic message.
    /// Everything the node wrote to standard output and error, over all its starts so far,
    /// one string per start (oldest first).
    pub fn logs(&self) -> Vec<String> {
        self.logs
            .iter()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .collect()
    }

    pub fn log_tail(&self) -> String {
        match self.logs.last() {
            Some(path) => format!(
                "---- tail of {} ----\n{}\n---- end of log ----",
                path.display(),
                tail(path, 80)
            ),
            None => "<no log yet>".to_string(),
        }
    }

    pub fn base_url(&self) -> String {
        let scheme = if self.https.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.http_addr())
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), path)
    }

    pub fn http_client(&self) -> &reqwest::Client {
        &self.client
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The loopback address the node listens on (and dials its peers from).
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// `<ip>:<http port>`.
    pub fn http_addr(&self) -> String {
        format!("{}:{}", self.ip, self.http_port)
    }

    /// `<ip>:<raft port>`.
    pub fn raft_addr(&self) -> String {
        format!("{}:{}", self.ip, self.raft_port)
    }

    /// The process runs (it may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// SIGKILL: no shutdown, no flush. Waits until the process is gone (a stopped process
    /// dies of SIGKILL too).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// SIGSTOP: the process freezes; its sockets stay open.
    pub fn pause(&mut self) {
        let child = self.child.as_ref().expect("the server is not running");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGSTOP).expect("send SIGSTOP");
        self.paused = true;
    }

    /// SIGCONT after `pause`.
    pub fn resume(&mut self) {
        let child = self.child.as_ref().expect("the server is not running");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT).expect("send SIGCONT");
        self.paused = false;
    }

    /// SIGTERM, then waits for the process to exit (SIGKILL and panic after the deadline).
    pub async fn stop(&mut self) -> ExitStatus {
        if self.paused {
            self.resume();
        }
        let mut child = self.child.take().expect("the server is not running");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("send SIGTERM");
        let deadline = Instant::now() + STOP_DEADLINE;
        loop {
            if let Some(status) = child.try_wait().expect("poll the child") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.fail(&format!(
                    "herald did not exit within {STOP_DEADLINE:?} of SIGTERM"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub enum StartError {
    /// The process exited complaining that an address was taken.
    Bind(String),
    Other(String),
}

impl Drop for Server {
    fn drop(&mut self) {
        let running = self.child.is_some();
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "herald test server node {} (http {}, running: {running}, data {}):\n{}",
                self.node_id,
                self.http_addr(),
                self.data_dir().display(),
                self.log_tail()
            );
            if self.repeats_failure {
                if let Some(failure) = super::failure::this_threads_failure() {
                    eprintln!("---- the test failed {failure}");
                }
            }
        }
    }
}
