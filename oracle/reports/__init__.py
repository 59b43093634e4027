"""Reports from a verified run: the model with honest denominators and intervals, and its
Markdown, HTML and file forms.
"""
