package dev.wirelint.example.blog;

import static org.assertj.core.api.Assertions.assertThat;

import dev.wirelint.junit5.WirelintTest;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;

/** Publishing and renaming posts: a second class, through the same wirelint. */
@WirelintTest
@SpringBootTest
class PostsTest {
  @Autowired Blog blog;
  @Autowired AuthorRepository authors;
  @Autowired PostRepository posts;

  @BeforeEach
  void empty() {
    posts.deleteAll();
    authors.deleteAll();
  }

  @Test
  void a_published_post_can_be_read() {
    Author ada = blog.join("ada", "Ada Lovelace");
    Post post = blog.publish(ada, "Hello", "First post");
    Post read = blog.post(post.getId()).orElseThrow();
    assertThat(read.getTitle()).isEqualTo("Hello");
    assertThat(read.getAuthorId()).isEqualTo("ada");
  }

  @Test
  void a_renamed_post_keeps_its_author() {
    Author grace = blog.join("grace", "Grace Hopper");
    Post post = blog.publish(grace, "Draft", "…");
    blog.rename(post.getId(), "Final");
    Post read = blog.post(post.getId()).orElseThrow();
    assertThat(read.getTitle()).isEqualTo("Final");
    assertThat(read.getAuthorId()).isEqualTo("grace");
  }
}
