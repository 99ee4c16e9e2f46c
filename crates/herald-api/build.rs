//! Rebuilds the crate when the committed web console build (`web-console/dist/` at the
//! workspace's root) changes. Its files are embedded (`src/api/routes/console.rs`), and Vite
//! names them after their content, so a new build adds and removes files, which the embedding
//! alone does not notice.
fn main() {
    println!("cargo:rerun-if-changed=../../web-console/dist");
}
