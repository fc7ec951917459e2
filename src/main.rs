#![forbid(unsafe_code)]

fn main() {
    std::process::exit(wirelint::cli::main());
}
