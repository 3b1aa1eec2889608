-- Where a call's tool came from when it was listed from a server (an MCP server):
-- the server, the annotations it listed and which rule decided the call's effect,
-- as JSON. A resume decides from this row, never from what the server says now.
ALTER TABLE steps ADD COLUMN source_json TEXT;
