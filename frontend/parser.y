/* The model language's grammar (docs/language.md is the reference). Builds the AST
 * with source locations; the elaborator gives it meaning. */
%code requires {
#include "frontend/parse_ctx.h"
}
%code provides {
int yylex(YYSTYPE *lval, YYLTYPE *lloc, void *scanner);
void yyerror(YYLTYPE *loc, void *scanner, ParseCtx *ctx, const char *msg);
}
%code {
#include <stdarg.h>
#include <string.h>
/* The parse stack bound: deeper nesting is reported as an error, not a crash. */
#define YYMAXDEPTH 2000
enum { MAX_EXPR_DEPTH = 200 };

static SrcLoc L(ParseCtx *ctx, YYLTYPE l) { return (SrcLoc){ctx->src, l.first_line, l.first_column}; }

static Expr *mk_binary(ParseCtx *ctx, BinOp op, Expr *a, Expr *b, YYLTYPE l) {
  Expr *e = ast_expr(ctx->arena, EX_BINARY, L(ctx, l));
  e->op = op; e->lhs = a; e->rhs = b;
  e->depth = 1 + (a->depth > b->depth ? a->depth : b->depth);
  if (e->depth > MAX_EXPR_DEPTH)
    parse_error(ctx, e->loc, "expression nested more than %d deep", MAX_EXPR_DEPTH);
  return e;
}

static int args_depth(ArgList *l) {
  int d = 0;
  for (int i = 0; i < l->n; i++) if (l->v[i].val->depth > d) d = l->v[i].val->depth;
  return d;
}

static Expr *mk_with_args(ParseCtx *ctx, ExprKind k, ArgList args, YYLTYPE l) {
  Expr *e = ast_expr(ctx->arena, k, L(ctx, l));
  e->args = args.v; e->nargs = args.n;
  e->depth = 1 + args_depth(&args);
  if (e->depth > MAX_EXPR_DEPTH)
    parse_error(ctx, e->loc, "expression nested more than %d deep", MAX_EXPR_DEPTH);
  return e;
}

static StmtList list_cat(StmtList a, StmtList b) {
  if (!a.head) return b;
  if (!b.head) return a;
  a.tail->next = b.head;
  a.tail = b.tail;
  return a;
}
static StmtList list1(Stmt *s) { return (StmtList){s, s}; }
static StmtList list_add(StmtList l, Stmt *s) {
  if (!s) return l;
  if (!l.head) return list1(s);
  l.tail->next = s;
  l.tail = s;
  return l;
}
}

%define api.pure full
/* yyreport_syntax_error below words the common mistakes; LAC makes the expected
 * tokens it reads exact. */
%define parse.error custom
%define parse.lac full
%locations
%lex-param {void *scanner}
%parse-param {void *scanner} {ParseCtx *ctx}

%union {
  int64_t ival;
  double fval;
  const char *str;
  Expr *expr;
  Stmt *stmt;
  StmtList list;
  ArgList args;
  Arg arg;
  TypeExpr type;
}

%token KW_CONFIG "'config'" KW_INPUT "'input'" KW_PARAM "'param'" KW_BLOCK "'block'"
%token KW_RETURN "'return'" KW_REPEAT "'repeat'" KW_IN "'in'" KW_TRAIN "'train'"
%token KW_WITH "'with'" KW_AS "'as'"
%token POW "'**'" FLOORDIV "'//'"
%token <ival> INT "integer" BOOL "'true' or 'false'"
%token <fval> FLOAT "number"
%token <str> IDENT "name" STRING "string"

%type <list> items config_entries body
%type <stmt> item config_entry input_decl param_decl block_def body_item train_decl
%type <expr> expr primary
%type <args> args args_opt exprs exprs_opt dims names names_opt
%type <arg> arg
%type <type> type

%left '+' '-'
%left '*' '/' FLOORDIV '%'
%precedence UMINUS
%right POW

%%

file: items                     { ctx->items = $1.head; }
    ;

items: %empty                   { $$ = (StmtList){0}; }
     | items item               { $$ = list_add($1, $2); }
     /* config { name = expr; ... } adds its entries as ST_CONFIG statements, in order */
     | items KW_CONFIG '{' config_entries '}' { $$ = list_cat($1, $4); }
     ;

item: input_decl | block_def | train_decl | body_item ;

config_entries: %empty          { $$ = (StmtList){0}; }
     | config_entries config_entry { $$ = list_add($1, $2); }
     ;

config_entry: IDENT '=' expr ';' {
        $$ = ast_stmt(ctx->arena, ST_CONFIG, L(ctx, @1)); $$->name = $1; $$->value = $3; }
     ;

input_decl: KW_INPUT IDENT ':' type ';' {
        $$ = ast_stmt(ctx->arena, ST_INPUT, L(ctx, @2)); $$->name = $2; $$->type = $4; }
     ;

param_decl: KW_PARAM IDENT ':' type ';' {
        $$ = ast_stmt(ctx->arena, ST_PARAM, L(ctx, @2)); $$->name = $2; $$->type = $4; }
     | KW_PARAM IDENT ':' type '=' expr ';' {
        $$ = ast_stmt(ctx->arena, ST_PARAM, L(ctx, @2)); $$->name = $2; $$->type = $4; $$->value = $6; }
     ;

type: IDENT '[' dims ']'        { $$ = (TypeExpr){$1, L(ctx, @1), $3.v, $3.n}; }
    | IDENT '[' ']'             { $$ = (TypeExpr){$1, L(ctx, @1), NULL, 0}; }
    ;

dims: expr                      { $$ = (ArgList){0}; arglist_push(ctx->arena, &$$, (Arg){NULL, $1, $1->loc}); }
    | dims ',' expr             { $$ = $1; arglist_push(ctx->arena, &$$, (Arg){NULL, $3, $3->loc}); }
    ;

block_def: KW_BLOCK IDENT '(' names_opt ')' '{' body '}' {
        $$ = ast_stmt(ctx->arena, ST_BLOCK, L(ctx, @2)); $$->name = $2;
        $$->args = $4.v; $$->nargs = $4.n; $$->body = $7.head; }
     ;

names_opt: %empty               { $$ = (ArgList){0}; }
     | names
     ;
names: IDENT                    { $$ = (ArgList){0}; arglist_push(ctx->arena, &$$, (Arg){$1, NULL, L(ctx, @1)}); }
     | names ',' IDENT          { $$ = $1; arglist_push(ctx->arena, &$$, (Arg){$3, NULL, L(ctx, @3)}); }
     ;

body: %empty                    { $$ = (StmtList){0}; }
    | body body_item            { $$ = list_add($1, $2); }
    ;

body_item: param_decl
     | IDENT '=' expr ';'       { $$ = ast_stmt(ctx->arena, ST_ASSIGN, L(ctx, @1)); $$->name = $1; $$->value = $3; }
     | KW_RETURN expr ';'       { $$ = ast_stmt(ctx->arena, ST_RETURN, L(ctx, @1)); $$->value = $2; }
     | KW_REPEAT IDENT KW_IN expr '{' body '}' {
        $$ = ast_stmt(ctx->arena, ST_REPEAT, L(ctx, @1)); $$->name = $2; $$->value = $4; $$->body = $6.head; }
     ;

train_decl: KW_TRAIN IDENT KW_WITH IDENT '(' args_opt ')' ';' {
        $$ = ast_stmt(ctx->arena, ST_TRAIN, L(ctx, @1)); $$->name = $2; $$->opt = $4;
        $$->args = $6.v; $$->nargs = $6.n; $$->value = ast_expr(ctx->arena, EX_NAME, L(ctx, @2)); }
     ;

expr: primary
    | expr '+' expr             { $$ = mk_binary(ctx, BO_ADD, $1, $3, @2); }
    | expr '-' expr             { $$ = mk_binary(ctx, BO_SUB, $1, $3, @2); }
    | expr '*' expr             { $$ = mk_binary(ctx, BO_MUL, $1, $3, @2); }
    | expr '/' expr             { $$ = mk_binary(ctx, BO_DIV, $1, $3, @2); }
    | expr FLOORDIV expr        { $$ = mk_binary(ctx, BO_FLOORDIV, $1, $3, @2); }
    | expr '%' expr             { $$ = mk_binary(ctx, BO_MOD, $1, $3, @2); }
    | expr POW expr             { $$ = mk_binary(ctx, BO_POW, $1, $3, @2); }
    | '-' expr %prec UMINUS     { $$ = mk_binary(ctx, BO_NEG, $2, $2, @1); $$->kind = EX_UNARY; $$->rhs = NULL; }
    | '+' expr %prec UMINUS     { $$ = $2; }
    ;

primary: INT                    { $$ = ast_expr(ctx->arena, EX_INT, L(ctx, @1)); $$->ival = $1; }
    | FLOAT                     { $$ = ast_expr(ctx->arena, EX_FLOAT, L(ctx, @1)); $$->fval = $1; }
    | BOOL                      { $$ = ast_expr(ctx->arena, EX_BOOL, L(ctx, @1)); $$->ival = $1; }
    | STRING                    { $$ = ast_expr(ctx->arena, EX_STR, L(ctx, @1)); $$->name = $1; }
    | IDENT                     { $$ = ast_expr(ctx->arena, EX_NAME, L(ctx, @1)); $$->name = $1; }
    | IDENT '(' args_opt ')'    { $$ = mk_with_args(ctx, EX_CALL, $3, @1); $$->name = $1; }
    | IDENT '(' args_opt ')' KW_AS IDENT {
        $$ = mk_with_args(ctx, EX_CALL, $3, @1); $$->name = $1; $$->scope = $6; $$->scope_loc = L(ctx, @6); }
    | '(' expr ')'              { $$ = $2; }
    | '(' expr ',' exprs_opt ')' {
        ArgList l = {0}; arglist_push(ctx->arena, &l, (Arg){NULL, $2, $2->loc});
        for (int i = 0; i < $4.n; i++) arglist_push(ctx->arena, &l, $4.v[i]);
        $$ = mk_with_args(ctx, EX_TUPLE, l, @1); }
    | '[' exprs_opt ']'         { $$ = mk_with_args(ctx, EX_LIST, $2, @1); }
    ;

exprs_opt: %empty               { $$ = (ArgList){0}; }
    | exprs
    | exprs ','
    ;
exprs: expr                     { $$ = (ArgList){0}; arglist_push(ctx->arena, &$$, (Arg){NULL, $1, $1->loc}); }
    | exprs ',' expr            { $$ = $1; arglist_push(ctx->arena, &$$, (Arg){NULL, $3, $3->loc}); }
    ;

args_opt: %empty                { $$ = (ArgList){0}; }
    | args
    ;
args: arg                       { $$ = (ArgList){0}; arglist_push(ctx->arena, &$$, $1); }
    | args ',' arg              { $$ = $1; arglist_push(ctx->arena, &$$, $3); }
    ;
arg: expr                       { $$ = (Arg){NULL, $1, $1->loc}; }
   | IDENT '=' expr             { $$ = (Arg){$1, $3, L(ctx, @1)}; }
   ;

%%

static bool expects(const yysymbol_kind_t *exp, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(yysymbol_name(exp[i]), name)) return true;
  return false;
}

/* A syntax error at the lookahead token. A missing ';' is reported just after the
 * token it should follow (often at the end of the previous line); a bracket left
 * open is named with the place it opened; a missing operand is called an expression;
 * otherwise bison's usual wording. */
static int yyreport_syntax_error(const yypcontext_t *yc, void *scanner, ParseCtx *ctx) {
  yysymbol_kind_t exp[YYNTOKENS], tok = yypcontext_token(yc);
  int n = yypcontext_expected_tokens(yc, exp, YYNTOKENS);
  if (n < 0) return 2; /* memory exhausted: yyerror says so */
  const char *got = yysymbol_name(tok);
  SrcLoc at = L(ctx, *yypcontext_location(yc));
  int open = ctx->depth - 1;
  char close[4] = "'?'";
  if (open >= 0 && open < (int)sizeof ctx->open_ch)
    close[1] = ctx->open_ch[open] == '(' ? ')' : ctx->open_ch[open] == '[' ? ']' : '}';
  if (expects(exp, n, "';'") && ctx->prev_end.line > 0) {
    parse_error(ctx, ctx->prev_end, "expected ';' before %s", got);
  } else if (close[1] != '?' && expects(exp, n, close)) {
    SrcLoc o = ctx->open[open];
    parse_error(ctx, at, "expected %s to close the '%c' at %d:%d, got %s", close, ctx->open_ch[open], o.line, o.col, got);
  } else if (expects(exp, n, "integer") && expects(exp, n, "'('")) {
    parse_error(ctx, at, "expected an expression, got %s", got);
  } else if (ctx->stray) {
    parse_error(ctx, at, "%s closes nothing: no bracket is open here", got);
  } else {
    char msg[200];
    int k = snprintf(msg, sizeof msg, "syntax error, unexpected %s", got);
    for (int i = 0; n <= 4 && i < n; i++)
      k += snprintf(msg + k, sizeof msg - k, "%s%s", i == 0 ? ", expecting " : i == n - 1 ? " or " : ", ",
                    yysymbol_name(exp[i]));
    parse_error(ctx, at, "%s", msg);
  }
  return 0;
}

void yyerror(YYLTYPE *loc, void *scanner, ParseCtx *ctx, const char *msg) {
  if (!strcmp(msg, "memory exhausted")) msg = "model nested too deeply";
  parse_error(ctx, L(ctx, *loc), "%s", msg);
}
