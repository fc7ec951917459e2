//! Commands whose bodies carry credentials (authentication, user
//! management): the analysis counts them by name and never reads them.
//!
//! A file of its own so that the command model, which asks it for every
//! command's kind, depends on this list alone and not on the module that
//! gathers the analysis (whose decoder depends on the command model).

/// Commands whose bodies carry credentials: counted by name only.
pub const SENSITIVE_COMMANDS: &[&str] = &[
    "authenticate",
    "saslStart",
    "saslContinue",
    "getnonce",
    "copydbgetnonce",
    "copydbsaslstart",
    "copydb",
    "copydbnonce",
    "createUser",
    "updateUser",
];

/// Whether `name` is one of the [`SENSITIVE_COMMANDS`] (in any case).
pub fn is_sensitive(name: &str) -> bool {
    SENSITIVE_COMMANDS
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
}
