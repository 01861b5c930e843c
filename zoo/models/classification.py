"""(placeholder: models of this family are being written)"""
