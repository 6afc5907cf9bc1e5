"""The tool model: the ``Tool`` interface and its errors, the enforcing runner,
and the shell tool."""
