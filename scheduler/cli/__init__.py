"""The `spotwise` command line: `app.py` registers the commands; each module holds one group."""
