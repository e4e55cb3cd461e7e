-- Webhook deliveries are answered as soon as they are in the ledger and processed from it in the
-- background: the payload is kept until the delivery is final, and a failure that may pass is
-- tried again at `retry_at`.
ALTER TABLE github_deliveries ADD COLUMN payload TEXT;
ALTER TABLE github_deliveries ADD COLUMN retry_at BIGINT;
CREATE INDEX github_deliveries_due ON github_deliveries (status, retry_at);
