"""The text format: lexer.py, parser.py (`ir.parse`; types_reader.py the tokens and the
type grammar) and printer.py (`str(mod)`)."""
