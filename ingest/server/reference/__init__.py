"""The configuration reference page (docs/reference/configuration.md), made from the code.

`keys` lists what the option parsers accept, `entries` says what each key means,
`render` writes the page; a test holds the three together so the page cannot drift.
"""
