//! `scafld` entry point; the command line lives in `cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(cli::main(std::env::args_os().collect()))
}
