ALTER TABLE outbox RESET (fillfactor);
