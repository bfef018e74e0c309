//! Progress reports of a direct session call (`crate::session_call`) on
//! the call's own stream.
//!
//! rmcp's session worker puts a `notifications/progress` on the stream of
//! the request whose `_meta` carried its token, but it never sees a direct
//! call: sent through the session's peer, the report would reach the
//! session's standalone stream. So the call reports through a
//! [`CallProgress`] in its context instead: the report, serialised as rmcp
//! serialises it, goes into the call's [`Outbox`] as an event, in order,
//! before the response; the first one makes the answer a stream. A call
//! that reports nothing is answered plain JSON, as rmcp's path answers it.
//!
//! The events are kept until the call's answer is resumed or forgotten, so
//! a call holds at most [`MAX_PROGRESS_BYTES`] of them; later reports are
//! dropped (a server flooding reports cannot grow the gateway's memory
//! without bound; rmcp's path bounds them by holding the reporter back).

use std::sync::Weak;

use bytes::Bytes;
use portcullis_handler::{CallProgress, ProgressSink};
use rmcp::model::{
    ProgressNotification, ProgressNotificationParam, ServerJsonRpcMessage, ServerNotification,
};
use tokio::sync::watch;

use crate::sessions::Outbox;

/// Most bytes of progress events one direct call holds for its client.
pub(crate) const MAX_PROGRESS_BYTES: usize = 256 * 1024;

/// A direct call's progress route: see the module docs.
pub(crate) fn for_call(outbox: Weak<watch::Sender<Outbox>>) -> CallProgress {
    CallProgress::new(CallReports { outbox })
}

struct CallReports {
    /// Weak, as in `crate::session_ask`: the context may outlive the call.
    outbox: Weak<watch::Sender<Outbox>>,
}

impl ProgressSink for CallReports {
    fn report(&self, report: ProgressNotificationParam) -> bool {
        let Some(outbox) = self.outbox.upgrade() else {
            return false;
        };
        let notice = ServerNotification::ProgressNotification(ProgressNotification::new(report));
        let Ok(bytes) = serde_json::to_vec(&ServerJsonRpcMessage::notification(notice)) else {
            return false;
        };
        outbox.send_if_modified(|outbox| {
            if outbox.answer.is_some() || outbox.progress_bytes + bytes.len() > MAX_PROGRESS_BYTES {
                return false;
            }
            outbox.progress_bytes += bytes.len();
            outbox.events.push(Bytes::from(bytes));
            true
        })
    }
}
