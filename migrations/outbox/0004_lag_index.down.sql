DROP INDEX IF EXISTS outbox_lag_idx;
