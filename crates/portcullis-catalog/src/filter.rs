//! Visibility filters: `allow` or `block` lists on tool names.
//!
//! A filter decides what the model can see, never what it may do (that is
//! the policy gate). An entry matches a tool's qualified name or its bare
//! name on the server, so `tools = { allow = ["search"] }` in an upstream's
//! table works as well as `docs__search`.

use std::collections::BTreeSet;

use crate::error::CatalogError;

/// Which tools of a server the model may see.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolFilter {
    /// Everything is visible.
    #[default]
    All,
    /// Only the listed tools are visible.
    Allow(BTreeSet<String>),
    /// Everything but the listed tools is visible.
    Block(BTreeSet<String>),
}

impl ToolFilter {
    /// Builds a filter from optional `allow` and `block` lists; setting both is
    /// a wiring error.
    ///
    /// ```
    /// use portcullis_catalog::ToolFilter;
    ///
    /// let f = ToolFilter::from_lists(Some(vec!["search".into()]), None).unwrap();
    /// assert!(f.admits("docs__search", "search"));
    /// assert!(!f.admits("docs__delete", "delete"));
    /// assert!(ToolFilter::from_lists(Some(vec![]), Some(vec![])).is_err());
    /// ```
    pub fn from_lists(
        allow: Option<Vec<String>>,
        block: Option<Vec<String>>,
    ) -> Result<Self, CatalogError> {
        match (allow, block) {
            (Some(_), Some(_)) => Err(CatalogError::FilterConflict),
            (Some(allow), None) => Ok(ToolFilter::Allow(allow.into_iter().collect())),
            (None, Some(block)) => Ok(ToolFilter::Block(block.into_iter().collect())),
            (None, None) => Ok(ToolFilter::All),
        }
    }

    /// Whether a tool with this qualified name and bare (server-side) name is
    /// visible.
    pub fn admits(&self, qualified: &str, bare: &str) -> bool {
        match self {
            ToolFilter::All => true,
            ToolFilter::Allow(names) => names.contains(qualified) || names.contains(bare),
            ToolFilter::Block(names) => !(names.contains(qualified) || names.contains(bare)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_lists_is_an_error_naming_the_fix() {
        let err =
            ToolFilter::from_lists(Some(vec!["a".into()]), Some(vec!["b".into()])).unwrap_err();
        assert_eq!(err, CatalogError::FilterConflict);
        assert!(
            err.to_string()
                .contains("set either \"allow\" or \"block\", not both")
        );
    }

    #[test]
    fn allow_and_block_match_qualified_or_bare() {
        let allow = ToolFilter::from_lists(Some(vec!["docs__search".into(), "fetch".into()]), None)
            .unwrap();
        assert!(allow.admits("docs__search", "search"));
        assert!(allow.admits("docs__fetch", "fetch"));
        assert!(!allow.admits("docs__write", "write"));
        let block = ToolFilter::from_lists(None, Some(vec!["write".into()])).unwrap();
        assert!(!block.admits("docs__write", "write"));
        assert!(block.admits("docs__search", "search"));
        assert!(ToolFilter::All.admits("anything", "anything"));
        // An empty allow list hides everything: it is an explicit choice.
        let empty = ToolFilter::from_lists(Some(vec![]), None).unwrap();
        assert!(!empty.admits("docs__search", "search"));
    }
}
