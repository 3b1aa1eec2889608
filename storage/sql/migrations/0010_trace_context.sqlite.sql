-- The W3C traceparent of the caller of submit: every attempt of the run, on any
-- worker, continues that trace, so a run resumed after a crash reads as one trace.
ALTER TABLE runs ADD COLUMN traceparent TEXT;
