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

use portcullis_catalog::Tool;
use serde::{Deserialize, Serialize};

// What a tool needs from its caller and who the caller is belong to the
// contract tool sources share with this server.
pub use portcullis_handler::access::{Access, Identity, check_call, missing_permissions};

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
    /// Where it came from ([`Registration::source`](crate::Registration::source)).
    pub source: String,
    /// Why, in the words the debug log uses.
    pub reason: String,
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
}
