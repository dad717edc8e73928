//! Empty on purpose: this crate only unifies dependency features (see its
//! Cargo.toml), so `cargo run --release -- demo` and `cargo test --release
//! --workspace` compile every shared crate once.
