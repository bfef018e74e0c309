//! Progress reports of a call answered in front of rmcp (a session's,
//! `crate::session_call`; a stateless 2026-07-28 one, `crate::direct_call`)
//! on the call's own answer.
//!
//! rmcp puts a `notifications/progress` on the stream of the request whose
//! `_meta` carried its token, but it never sees a direct call: sent through
//! the call's peer (a session's, or a closed one), the report would reach
//! the session's standalone stream or nobody. So the call reports through a
//! [`CallProgress`] in its context instead: the report, serialised as rmcp
//! serialises it, goes into the call's [`Outbox`] as an event, in order,
//! before the response; the first one makes the answer a stream. A call
//! that reports nothing is answered plain JSON, as rmcp's path answers it.
//!
//! A call's reports waiting in its outbox are bounded to
//! [`MAX_PROGRESS_BYTES`]; later reports are dropped (a server flooding
//! reports cannot grow the gateway's memory without bound; rmcp's path
//! bounds them by holding the reporter back). A session keeps its call's
//! events until the answer is resumed or forgotten, so there the bound is
//! on all of a call's reports; a stateless answer cannot be resumed, so its
//! stream takes reports out as it sends them and the bound is on those not
//! yet sent. A report after the answer is dropped.

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

/// A direct call's progress route into `outbox`: see the module docs.
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
