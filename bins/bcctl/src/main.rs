//! `bcctl`: see the crate documentation (`bcctl --help`).

use std::process::ExitCode;

fn main() -> ExitCode {
    bcctl::main()
}
