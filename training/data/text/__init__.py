"""Text for training: the rows of users' text,label files (`text_rows`) and text files as a `DataSource` of byte-level tokens (`text_files`)."""
