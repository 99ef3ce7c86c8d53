"""The store on PostgreSQL (issue 31): connections and transactions, the schema, operations;
vectors.py and fulltext.py (pgvector, tsvector) come from the port's other half."""
