//! Claims ordered by pod count, kept sorted in O(1) per change.

/// Claim indices kept sorted by pod count ascending in O(1) per change: `order[end[k-1]..end[k]]`
/// holds the claims with exactly `k` pods.
#[derive(Clone, Default)]
pub(super) struct CountOrder {
    pub(super) order: Vec<usize>,
    pub(super) pos: Vec<usize>,
    pub(super) end: Vec<usize>,
}

impl CountOrder {
    pub(super) fn swap(&mut self, a: usize, b: usize) {
        self.order.swap(a, b);
        self.pos[self.order[a]] = a;
        self.pos[self.order[b]] = b;
    }

    /// Adds claim `claim` (the next index) with one pod.
    pub(super) fn push(&mut self, claim: usize) {
        if self.end.is_empty() {
            self.end = vec![0, 0];
        }
        let n = self.order.len();
        self.order.push(claim);
        if self.pos.len() <= claim {
            self.pos.resize(claim + 1, 0);
        }
        self.pos[claim] = n;
        let mut p = n;
        for k in (2..self.end.len()).rev() {
            let first = self.end[k - 1];
            if first < self.end[k] {
                self.swap(p, first);
                p = first;
            }
            self.end[k] += 1;
        }
        self.end[1] += 1;
    }

    /// Claim `claim` goes from `from` pods to `from + 1`.
    pub(super) fn increment(&mut self, claim: usize, from: usize) {
        if from + 1 >= self.end.len() {
            self.end.push(self.order.len());
        }
        let last = self.end[from] - 1;
        self.swap(self.pos[claim], last);
        self.end[from] -= 1;
    }
}
