//! A call on its way out of the tool server: the exit its edge seals, and
//! what the gate decided. The tool server makes one for every call; a run
//! parked behind its client's input (`input.rs`) ends with one too.

use portcullis_catalog::ToolResult;
use portcullis_catalog::framing::Exit;
use portcullis_catalog::gate::CallDecision;

/// A call on its way out: the exit to seal, and what the gate decided.
pub(crate) struct Answer {
    /// What leaves through `ToolServer::leave`.
    pub(crate) exit: Exit,
    /// What the gate (or a guard behind the handler) decided.
    pub(crate) decision: CallDecision,
    /// The caller cancelled the call before it was answered.
    pub(crate) cancelled: bool,
}

impl Answer {
    /// Refused before (or instead of) the handler: `answer` is the whole
    /// result.
    pub(crate) fn refused(decision: CallDecision, answer: ToolResult) -> Self {
        Answer {
            exit: Exit::Own(answer),
            decision,
            cancelled: false,
        }
    }
}
