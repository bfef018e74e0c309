//! What a tool needs from its caller, and who the caller is.
//!
//! A route with `auth: true` needs an [`Identity`] whose `perms` hold every
//! one of its [`Access::permissions`]. The surface withholds such a tool
//! when the configured identity cannot call it; [`check_call`] runs again
//! on every call as a backstop (the caller's own identity, when the surface
//! authenticated one) and answers the contract codes `ERR_MCP_AUTH_REQUIRED`
//! and `ERR_MCP_PERM_DENIED`. An application's forwarder runs it once more
//! before any request leaves, so a registration served by something else
//! keeps the rule.

use std::collections::BTreeSet;

use portcullis_catalog::error_mapping::codes::{ERR_MCP_AUTH_REQUIRED, ERR_MCP_PERM_DENIED};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The identity sent with every app call (what a controller reads as
/// `req._info`), e.g. `{ user: { userId: "mcp-agent" }, perms: ["read"] }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// Who the caller is, passed through to the tool verbatim.
    #[serde(default)]
    pub user: Value,
    /// The permissions the model is granted.
    #[serde(default)]
    pub perms: Vec<String>,
}

impl Identity {
    /// An identity with these permissions and the given user object.
    pub fn new(user: Value, perms: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Identity {
            user,
            perms: perms.into_iter().map(Into::into).collect(),
        }
    }
}

/// What a tool needs from the caller beyond exposure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// The route requires an authenticated caller (`auth: true`).
    #[serde(default)]
    pub auth: bool,
    /// Every one of these must be in the identity's `perms`.
    #[serde(default)]
    pub permissions: Vec<String>,
}

impl Access {
    /// No requirement: any caller.
    pub fn open() -> Self {
        Access::default()
    }

    /// Requires an identity holding every one of `permissions`.
    pub fn authenticated(permissions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Access {
            auth: true,
            permissions: permissions.into_iter().map(Into::into).collect(),
        }
    }
}

/// The permissions in `required` that `identity` does not hold.
///
/// ```
/// use portcullis_handler::access::{missing_permissions, Identity};
///
/// let id = Identity::new(serde_json::json!({"userId": "agent"}), ["read"]);
/// assert_eq!(missing_permissions(&["read".into(), "actions:w".into()], Some(&id)), ["actions:w"]);
/// assert_eq!(missing_permissions(&["read".into()], None), ["read"]);
/// ```
pub fn missing_permissions<'a>(
    required: &'a [String],
    identity: Option<&Identity>,
) -> Vec<&'a str> {
    let held: BTreeSet<&str> = identity
        .map(|i| i.perms.iter().map(String::as_str).collect())
        .unwrap_or_default();
    required
        .iter()
        .map(String::as_str)
        .filter(|perm| !held.contains(perm))
        .collect()
}

/// The call-time backstop for an authenticated route: `Err` carries the
/// contract code the caller receives as a tool error.
///
/// ```
/// use portcullis_handler::access::{check_call, Access, Identity};
///
/// let route = Access::authenticated(["actions:w"]);
/// assert_eq!(check_call(&route, None), Err("ERR_MCP_AUTH_REQUIRED"));
/// let reader = Identity::new(serde_json::Value::Null, ["read"]);
/// assert_eq!(check_call(&route, Some(&reader)), Err("ERR_MCP_PERM_DENIED"));
/// assert_eq!(check_call(&Access::open(), None), Ok(()));
/// ```
pub fn check_call(access: &Access, identity: Option<&Identity>) -> Result<(), &'static str> {
    if !access.auth {
        return Ok(());
    }
    let Some(identity) = identity else {
        return Err(ERR_MCP_AUTH_REQUIRED);
    };
    if missing_permissions(&access.permissions, Some(identity)).is_empty() {
        Ok(())
    } else {
        Err(ERR_MCP_PERM_DENIED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_backstop_refuses_with_contract_codes() {
        let route = Access::authenticated(["w"]);
        assert_eq!(check_call(&route, None), Err(ERR_MCP_AUTH_REQUIRED));
        let id = Identity::new(Value::Null, ["r"]);
        assert_eq!(check_call(&route, Some(&id)), Err(ERR_MCP_PERM_DENIED));
        let id = Identity::new(Value::Null, ["w"]);
        assert_eq!(check_call(&route, Some(&id)), Ok(()));
    }

    #[test]
    fn identity_parses_from_the_config_shape() {
        let id: Identity =
            serde_json::from_value(json!({"user": {"userId": "mcp-agent"}, "perms": ["read"]}))
                .unwrap();
        assert_eq!(id.perms, ["read"]);
        assert_eq!(id.user["userId"], "mcp-agent");
    }
}
