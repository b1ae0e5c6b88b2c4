"""The two errors every data reader raises: a file is missing, or a file is not what it should be."""


class DataNotFoundError(FileNotFoundError):
    """No usable copy of a data set was found; the message names the files expected and the folder looked in."""


class CorruptDataError(ValueError):
    """A data file exists but is not in its published format; the message names the file and what is wrong."""
