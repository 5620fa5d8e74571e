"""The catalog queries of the MySQL source (information_schema; PyMySQL ``%s``
placeholders, every value bound; the database is the session's, ``DATABASE()``)."""

TABLES_SQL = """
SELECT TABLE_NAME FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME
"""
SIZE_SQL = """
SELECT TABLE_ROWS, DATA_LENGTH FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s
"""
COLUMNS_SQL = """
SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, IS_NULLABLE
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION
"""
# Primary key first, then unique indexes by width; an index over a column prefix
# (SUB_PART) does not order the whole value.
KEYS_SQL = """
SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND NON_UNIQUE = 0
ORDER BY INDEX_NAME <> 'PRIMARY', INDEX_NAME, SEQ_IN_INDEX
"""
# MariaDB's JSON is LONGTEXT with a json_valid(`col`) CHECK constraint.
JSON_CHECKS_SQL = """
SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = %s AND CHECK_CLAUSE LIKE 'json_valid(%%'
"""
