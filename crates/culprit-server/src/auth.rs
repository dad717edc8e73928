//! Users and their secrets for SCRAM-SHA-256 password authentication.
//!
//! The users file has one line per user (`#` starts a comment):
//!
//! ```text
//! alice:read:scram-sha-256:4096:<salt, base64>:<SaltedPassword, base64>
//! ```
//!
//! The secret is `SaltedPassword = PBKDF2-HMAC-SHA256(password, salt, 4096)`
//! (RFC 5802), what the server needs to run SCRAM; the password itself is
//! never stored. A SaltedPassword lets whoever reads it log in as that user
//! (like PostgreSQL's `pg_authid`), so keep the file private (mode 600).
//! `culprit user add` writes lines. Roles: `read` (queries only) and
//! `write` (may also create and drop session objects).

use std::collections::HashMap;
use std::fmt::Debug;
use std::path::Path;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use pgwire::api::auth::sasl::scram::{gen_salted_password, random_nonce, SCRAM_ITERATIONS};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Queries only (the default).
    Read,
    /// Also DDL and DML on session objects (views, memory tables).
    Write,
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            _ => Err(format!("unknown role '{s}' (expected read or write)")),
        }
    }
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
        }
    }
}

#[derive(Clone)]
struct Secret {
    role: Role,
    salt: Vec<u8>,
    salted: Vec<u8>,
}

/// The users of a server.
#[derive(Clone, Default)]
pub struct Users {
    users: HashMap<String, Secret>,
}

impl Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Users({} users)", self.users.len())
    }
}

impl Users {
    /// Reads a users file; errors name the line.
    pub fn load(path: &Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the users file: {e}", path.display()))?;
        Users::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("line {}: {why}", i + 1);
            let f: Vec<&str> = line.split(':').collect();
            if f.len() != 6 || f[2] != "scram-sha-256" {
                return Err(bad(
                    "expected name:role:scram-sha-256:iterations:salt:secret (see culprit user add)",
                ));
            }
            if f[3] != SCRAM_ITERATIONS.to_string() {
                return Err(bad(&format!("iterations must be {SCRAM_ITERATIONS}")));
            }
            let role = f[1].parse::<Role>().map_err(|e| bad(&e))?;
            let salt = STANDARD
                .decode(f[4])
                .map_err(|e| bad(&format!("salt: {e}")))?;
            let salted = STANDARD
                .decode(f[5])
                .map_err(|e| bad(&format!("secret: {e}")))?;
            if salted.len() != 32 {
                return Err(bad("the secret is not a SHA-256 SaltedPassword"));
            }
            if users
                .insert(f[0].to_string(), Secret { role, salt, salted })
                .is_some()
            {
                return Err(bad(&format!("user '{}' twice", f[0])));
            }
        }
        if users.is_empty() {
            return Err("no users".into());
        }
        Ok(Users { users })
    }

    /// The users-file line for a user with this password (a fresh salt).
    pub fn line(name: &str, role: Role, password: &str) -> Result<String, String> {
        if name.is_empty() || name.contains(':') || name.contains(char::is_whitespace) {
            return Err(format!("bad user name '{name}'"));
        }
        if password.is_empty() {
            return Err("empty password".into());
        }
        let salt = STANDARD.decode(random_nonce()).map_err(|e| e.to_string())?;
        let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
        Ok(format!(
            "{name}:{}:scram-sha-256:{SCRAM_ITERATIONS}:{}:{}",
            role.name(),
            STANDARD.encode(&salt),
            STANDARD.encode(salted)
        ))
    }

    pub fn role(&self, user: &str) -> Option<Role> {
        self.users.get(user).map(|s| s.role)
    }

    /// Every user with its role (in no order).
    pub fn names_and_roles(&self) -> Vec<(String, Role)> {
        self.users
            .iter()
            .map(|(name, s)| (name.clone(), s.role))
            .collect()
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or("");
        match self.users.get(user) {
            Some(s) => Ok(Password::new(Some(s.salt.clone()), s.salted.clone())),
            // Same answer as a wrong password: do not tell who exists.
            None => Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                crate::sqlstate::INVALID_PASSWORD.into(),
                format!("password authentication failed for user \"{user}\""),
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_bad_files_name_the_line() {
        let line = Users::line("alice", Role::Read, "s3cret").unwrap();
        assert!(!line.contains("s3cret"));
        let users = Users::parse(&format!("# users\n{line}\n")).unwrap();
        assert_eq!(users.role("alice"), Some(Role::Read));
        assert_eq!(users.role("bob"), None);
        let err = Users::parse("# x\nbob:admin:scram-sha-256:4096:AA==:AA==\n").unwrap_err();
        assert!(err.starts_with("line 2: unknown role"), "{err}");
        assert!(Users::parse("").is_err());
    }
}
