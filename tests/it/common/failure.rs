//! Each test's panic message, kept so it can be repeated after the nodes' log tails.
//!
//! A failing cluster test prints its message first and then, as its nodes are dropped, 80 log
//! lines per node: a reader (or a CI summary) that sees only the end of the output would see
//! the logs and not the failure. The hook records the message of the panicking test thread
//! (test threads are named after their test); [`Server`](super::Server)'s drop repeats it.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, Once};

/// How much of a message is repeated.
const REPEATED_CHARS: usize = 3000;

static MESSAGES: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(Default::default);

/// Installs the recording hook (once per process), keeping the default hook's output.
pub fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(name) = std::thread::current().name() {
                let message = info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let location = info
                    .location()
                    .map(|at| format!("{}:{}", at.file(), at.line()))
                    .unwrap_or_default();
                if let Ok(mut messages) = MESSAGES.lock() {
                    messages.insert(name.to_string(), format!("at {location}: {message}"));
                }
            }
            default(info);
        }));
    });
}

/// The current thread's panic message, shortened, if it panicked.
pub fn this_threads_failure() -> Option<String> {
    let name = std::thread::current().name()?.to_string();
    let message = MESSAGES.lock().ok()?.get(&name)?.clone();
    Some(message.chars().take(REPEATED_CHARS).collect())
}
