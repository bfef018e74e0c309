//! A handler's failure, and a guard's typed refusal behind a handler.

use std::fmt;

use portcullis_catalog::ToolResult;
use portcullis_catalog::gate::CallDecision;

/// A handler's failure. Its message reaches the model only when it starts
/// with `ERR_`; anything else is logged and replaced by `ERR_TOOL_FAILED`.
///
/// Any `std::error::Error` converts into it (so `?` works), and
/// [`ToolError::msg`] makes one from a message, typically a contract code:
///
/// ```
/// use portcullis_handler::ToolError;
///
/// let e = ToolError::msg("ERR_DEVICE_OFFLINE: miner-3");
/// assert_eq!(e.message(), "ERR_DEVICE_OFFLINE: miner-3");
/// let io: ToolError = std::io::Error::other("disk on fire").into();
/// assert_eq!(io.message(), "disk on fire");
/// ```
pub struct ToolError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    // Boxed: a refusal is rare, and every handler's `Result` carries this.
    refusal: Option<Box<(CallDecision, ToolResult)>>,
}

impl ToolError {
    /// A failure with this message.
    pub fn msg(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            source: None,
            refusal: None,
        }
    }

    /// A refusal by a guard behind the handler (a toolset's quarantine of a
    /// tool that drifted since it was listed, say): `answer` is written by
    /// that guard, holds no tool output and reaches the model as it is;
    /// `decision` is what the audit trail records. Typed, so no one has to
    /// read the verdict back out of the words.
    pub fn refused(decision: CallDecision, answer: ToolResult) -> Self {
        ToolError {
            message: decision.as_str().to_owned(),
            source: None,
            refusal: Some(Box::new((decision, answer))),
        }
    }

    /// The refusal, when [`ToolError::refused`] made this.
    pub fn refusal(&self) -> Option<(CallDecision, &ToolResult)> {
        self.refusal
            .as_deref()
            .map(|(decision, answer)| (*decision, answer))
    }

    /// Takes the refusal out, when [`ToolError::refused`] made this.
    pub fn into_refusal(self) -> Result<(CallDecision, ToolResult), Box<ToolError>> {
        match self.refusal {
            Some(refusal) => Ok(*refusal),
            None => Err(Box::new(self)),
        }
    }

    /// The message (the edge decides whether the model may see it).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, when the failure came from one.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

// Deliberately not `std::error::Error` (like `anyhow::Error`): that is what
// lets every error type convert into it with `?`.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(error: E) -> Self {
        ToolError {
            message: error.to_string(),
            source: Some(Box::new(error)),
            refusal: None,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("message", &self.message)
            .field("source", &self.source)
            .field("refusal", &self.refusal.as_deref().map(|(d, _)| d))
            .finish()
    }
}
