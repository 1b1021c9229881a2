DROP TABLE cursor_keys;
