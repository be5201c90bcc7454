"""The pipeline's state store: typed records (chunk reports, finished snapshots, stream seed, status, launch)
kept as JSON files under ``state.path``, on a local disk or any fsspec URI.

storage  files at a local path or URI, written atomically
store    where each record lives and how it is read and written
records  the records themselves, one JSON form each
"""
