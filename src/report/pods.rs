//! `verify --pods`'s lines and events.

use super::{Event, Format, Reporter};
use crate::podcheck::NodePods;

impl Reporter {
    /// One node's test pod and its checks: a JSON event, and a line in text.
    pub fn pods(&self, r: &NodePods) {
        self.json(Event::Pods { result: r });
        if self.format == Format::Text {
            self.say(&r.line());
        }
    }
}
