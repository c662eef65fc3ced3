"""The text format: lexer.py, parser.py (`ir.parse`) and printer.py (`str(mod)`)."""
