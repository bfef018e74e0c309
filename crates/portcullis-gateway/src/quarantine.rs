//! A quarantined tool as the tool server registers it, whichever source it
//! came from (an upstream, a native plugin, an app): the catalogue's stub,
//! made visible to the exposure gate. Calling it never reaches the source.

use portcullis_catalog::{Tool, ToolAnnotations};

/// A quarantine stub as the exposure gate sees it: read-only. It never
/// reaches the server (calling it returns the drift guard's denial), and a
/// stub the gate hid would leave the model unable to tell the user that the
/// tool is quarantined, which is the stub's whole purpose. An `allow_tools`
/// list still hides it like any other tool.
pub fn quarantine_stub_definition(definition: Tool) -> Tool {
    definition.with_annotations(ToolAnnotations::read_only(true))
}
