//! The Suggest panel's model: the search request built from the session (its plan is the
//! model and "your plan"; the cost panel's topology), and adopting the winner.

use super::*;
use crate::suggest::request::SuggestRequest;

impl Session {
    /// The request the Suggest panel sends for `devices` devices (default: the plan's mesh
    /// size) and a budget of `memory_gb` GB per device (default: the device's memory). The
    /// session's plan is priced beside the search's when it runs on as many devices.
    pub fn suggest_request(
        &self,
        devices: Option<usize>,
        memory_gb: Option<f64>,
    ) -> SuggestRequest {
        SuggestRequest {
            text: Some(self.text.clone()),
            devices: devices.or_else(|| self.plan.mesh().map(|m| m.size())),
            topology: Some(self.topology.clone()),
            memory: memory_gb.map(|g| g * 1e9),
            top: Some(5),
            ..SuggestRequest::default()
        }
    }

    /// Loads `text`; with `compare`, pins the current plan first.
    pub(super) fn adopt_suggestion(&mut self, text: String, compare: bool) {
        if compare {
            self.pin();
        }
        self.edit_text(text);
    }
}
