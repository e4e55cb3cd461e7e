-- Deliveries about one issue or pull request are processed one at a time, in the order they were
-- received, by every daemon on the store: `subject` names what a delivery is about
-- (`owner/name#number`), and a delivery is not processed while an earlier one about the same
-- subject is queued, being processed, or failed with a retry to come. Deliveries accepted before
-- this version have no subject and are not held back.
ALTER TABLE github_deliveries ADD COLUMN subject TEXT;
CREATE INDEX github_deliveries_by_subject ON github_deliveries (subject, received_at)
    WHERE subject IS NOT NULL;
