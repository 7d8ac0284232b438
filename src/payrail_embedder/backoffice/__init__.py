"""The backoffice: operators curate the registry in a browser (`payrail-embedder backoffice`).

app.py holds the routes, templates/ the pages, static/ the style sheet the app serves itself.
"""
