from engram.interfaces.cli import app

app(prog_name="engram")
