//! The web console and the example page in a real browser.

mod browser_examples;
mod console;
