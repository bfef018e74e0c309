//! The exposure gate: which tools the model may see at all.
//!
//! MCP's `readOnlyHint` is advisory, so the server gates tools itself:
//!
//! | tool | exposed when |
//! |---|---|
//! | read-only (`readOnlyHint: true`) | always, unless `allow_tools` is set and does not list it |
//! | anything else (a write) | `allow_write`, or listed in `allow_tools` |
//! | needs authentication ([`Access::auth`]) | as above, and an [`Identity`] is configured whose `perms` hold every entry of [`Access::permissions`]; with [`Exposure::authenticated_callers`], registered, and listed and callable for each caller whose own identity (from its access token) holds them |
//!
//! With `allow_tools` set, only the listed tools are exposed. A withheld tool
//! is never registered: not listed, not callable. The call-time checks
//! ([`check_call`]) run again as a backstop and answer
//! `ERR_MCP_AUTH_REQUIRED` / `ERR_MCP_PERM_DENIED` as tool results.
//!
//! (`stream: true` routes never become tools at all; the route-table source
//! drops them before they reach this gate.)

use std::collections::BTreeSet;

use portcullis_catalog::Tool;
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

/// The gate's settings (`allowWrite`, `allowTools`, `identity` in
/// [`crate::ServeOptions`]' JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Exposure {
    /// Expose tools not declared read-only.
    #[serde(default)]
    pub allow_write: bool,
    /// When set, expose only these tool ids (write tools included).
    #[serde(default)]
    pub allow_tools: Option<Vec<String>>,
    /// The identity for authenticated routes.
    #[serde(default)]
    pub identity: Option<Identity>,
    /// Every HTTP caller is authenticated and brings its own identity (the
    /// OAuth resource-server mode: its token's subject, its scopes as
    /// `perms`): a route needing authentication is registered whatever
    /// `identity` says, and each call and listing checks the caller's.
    #[serde(default)]
    pub authenticated_callers: bool,
}

/// A tool the gate held back, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Withheld {
    /// The tool id.
    pub id: String,
    /// Where it came from ([`crate::Registration::source`]).
    pub source: String,
    /// Why, in the words the debug log uses.
    pub reason: String,
}

/// The permissions in `required` that `identity` does not hold.
///
/// ```
/// use portcullis_server::exposure::{missing_permissions, Identity};
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

impl Exposure {
    /// Why `tool` is withheld, or `None` when it is exposed. The checks run
    /// in the table's order, so the first reason that applies is reported.
    ///
    /// ```
    /// use portcullis_catalog::{Tool, ToolAnnotations};
    /// use portcullis_server::exposure::{Access, Exposure};
    ///
    /// let read = Tool::new("get").with_annotations(ToolAnnotations::read_only(true));
    /// let write = Tool::new("set");
    /// let gate = Exposure::default();
    /// assert_eq!(gate.reason_withheld(&read, &Access::open()), None);
    /// assert_eq!(gate.reason_withheld(&write, &Access::open()).as_deref(), Some("write tool needs allow_write or allow_tools"));
    /// ```
    pub fn reason_withheld(&self, tool: &Tool, access: &Access) -> Option<String> {
        if let Some(allow) = &self.allow_tools
            && !allow.iter().any(|name| name == &tool.name)
        {
            return Some("not in allow_tools".into());
        }
        if access.auth && !self.authenticated_callers {
            if self.identity.is_none() {
                return Some("auth route needs an identity".into());
            }
            let missing = missing_permissions(&access.permissions, self.identity.as_ref());
            if !missing.is_empty() {
                return Some(format!(
                    "identity lacks permissions: {}",
                    missing.join(", ")
                ));
            }
        }
        if !tool.is_read_only() && !self.allow_write && self.allow_tools.is_none() {
            return Some("write tool needs allow_write or allow_tools".into());
        }
        None
    }
}

/// The call-time backstop for an authenticated route: `Err` carries the
/// contract code the caller receives as a tool error.
///
/// ```
/// use portcullis_server::exposure::{check_call, Access, Identity};
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
    use portcullis_catalog::ToolAnnotations;
    use serde_json::json;

    fn read(name: &str) -> Tool {
        Tool::new(name).with_annotations(ToolAnnotations::read_only(true))
    }

    #[test]
    fn exposure_table() {
        let write = Tool::new("act");
        let open = Access::open();
        let default = Exposure::default();
        assert_eq!(default.reason_withheld(&read("get"), &open), None);
        assert!(default.reason_withheld(&write, &open).is_some());

        let allow_write = Exposure {
            allow_write: true,
            ..Default::default()
        };
        assert_eq!(allow_write.reason_withheld(&write, &open), None);

        let listed = Exposure {
            allow_tools: Some(vec!["act".into()]),
            ..Default::default()
        };
        assert_eq!(
            listed.reason_withheld(&write, &open),
            None,
            "listing a write authorises it"
        );
        assert_eq!(
            listed.reason_withheld(&read("get"), &open).as_deref(),
            Some("not in allow_tools"),
            "with allow_tools only the listed tools are exposed"
        );
    }

    #[test]
    fn authenticated_routes_need_an_identity_covering_their_permissions() {
        let route = Access::authenticated(["read", "actions:w"]);
        let tool = read("devices_get");
        let none = Exposure::default();
        assert_eq!(
            none.reason_withheld(&tool, &route).as_deref(),
            Some("auth route needs an identity")
        );
        let partial = Exposure {
            identity: Some(Identity::new(json!({"userId": "a"}), ["read"])),
            ..Default::default()
        };
        assert_eq!(
            partial.reason_withheld(&tool, &route).as_deref(),
            Some("identity lacks permissions: actions:w")
        );
        let full = Exposure {
            identity: Some(Identity::new(
                json!({"userId": "a"}),
                ["actions:w", "read", "x"],
            )),
            ..Default::default()
        };
        assert_eq!(full.reason_withheld(&tool, &route), None);
        // An auth route with no listed permissions needs only an identity.
        assert_eq!(
            full.reason_withheld(&tool, &Access::authenticated(Vec::<String>::new())),
            None
        );
    }

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
